#include "prefix/disk_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string Errno(int err) { return std::strerror(err); }

// The disk cache `what` ("folder", "lock file") at `path`, stat'ed as `st`:
// this user's, and writable by no one else.
Status CheckPrivate(const std::string& what, const std::string& path, const struct stat& st) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return FailedPrecondition(
        "the disk cache " + what + " " + path + " is owned by another user (uid " +
        std::to_string(st.st_uid) + "; this process runs as uid " + std::to_string(me) +
        "): it could hold that user's page files; give --disk-cache-dir a folder of this "
        "user's own");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", unsigned(st.st_mode & 07777));
    return FailedPrecondition(
        "the disk cache " + what + " " + path + " is writable by its group or others (mode " +
        mode + "): another user could plant page files this engine would load; chmod go-w " +
        "it, or give --disk-cache-dir a folder only this user can write");
  }
  return Status::Ok();
}

// Makes `p` and its missing parents, each 0700 (an existing one is kept as it is).
Status MakeFolders(const fs::path& p) {
  if (::mkdir(p.c_str(), 0700) == 0 || errno == EEXIST) return Status::Ok();
  if (errno == ENOENT && p.has_parent_path() && p.parent_path() != p) {
    TANDEM_RETURN_IF_ERROR(MakeFolders(p.parent_path()));
    if (::mkdir(p.c_str(), 0700) == 0 || errno == EEXIST) return Status::Ok();
  }
  return Unavailable("cannot create the disk cache folder " + p.string() + ": " + Errno(errno));
}

// `path` exists (made if missing), is a folder and is ours alone. The root
// the operator named may be a symbolic link (followed); the folder the tier
// makes inside it may not.
Status MakePrivateFolder(const std::string& path, bool follow_link) {
  TANDEM_RETURN_IF_ERROR(MakeFolders(path));
  struct stat st;
  if ((follow_link ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) {
    return Unavailable("cannot read the disk cache folder " + path + ": " + Errno(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return FailedPrecondition(
        "the disk cache folder " + path + " is not a folder" +
        (S_ISLNK(st.st_mode) ? " (a symbolic link, which could lead anywhere)" : ""));
  }
  return CheckPrivate("folder", path, st);
}

// The pid the holder wrote into the lock file ("unknown" while it has not).
std::string Holder(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string pid;
  for (ssize_t i = 0; i < n && std::isdigit(static_cast<unsigned char>(text[i])); ++i)
    pid += text[i];
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

StatusOr<std::unique_ptr<DiskFolder>> DiskFolder::Own(const std::string& root,
                                                      const std::string& name) {
  fs::path top(root);
  if (!top.has_filename() && top.has_parent_path()) top = top.parent_path();  // "dir/" is "dir"
  TANDEM_RETURN_IF_ERROR(MakePrivateFolder(top.string(), /*follow_link=*/true));
  const std::string path = (top / name).string();
  TANDEM_RETURN_IF_ERROR(MakePrivateFolder(path, /*follow_link=*/false));
  const std::string lock_path = path + "/lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP)
      return FailedPrecondition("the disk cache lock file " + lock_path + " is a symbolic link");
    return Unavailable("cannot open the disk cache lock file " + lock_path + ": " + Errno(err));
  }
  auto refuse = [fd](Status st) {
    ::close(fd);
    return st;
  };
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return refuse(Unavailable("cannot read " + lock_path + ": " + Errno(errno)));
  if (!S_ISREG(st.st_mode))
    return refuse(FailedPrecondition("the disk cache lock file " + lock_path + " is not a file"));
  if (Status mine = CheckPrivate("lock file", lock_path, st); !mine.ok()) return refuse(mine);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK)
      return refuse(Unavailable("cannot lock " + lock_path + ": " + Errno(err)));
    return refuse(FailedPrecondition(
        "the disk cache folder " + path + " is in use by another process (pid " + Holder(fd) +
        "): each engine needs a folder of its own (its own "
        "--disk-cache-dir; serve --disagg gives each of its engines one)"));
  }
  // Names the holder for the next process refused; the lock, not this text, decides.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    return refuse(Unavailable("cannot write " + lock_path + ": " + Errno(errno)));
  }
  return std::unique_ptr<DiskFolder>(new DiskFolder(path, fd));
}

DiskFolder::~DiskFolder() { ::close(lock_fd_); }  // the flock goes with the last descriptor

}  // namespace tandem
