// The folder a disk tier (L3) keeps its page files in, owned by one process.
//
// Two processes on one folder delete each other's in-flight files (the
// start-up scan removes interrupted writes), write the same page files and
// each budget the disk alone; so the owner holds an exclusive flock on
// <folder>/lock, which names its pid, and a second process is refused with
// that pid. A user who can write the folder, the folder above it or the lock
// file could plant page files the tier would load; so each must belong to
// this process's user and be writable by no one else, or the tier is refused,
// saying which and why. Folders made here are 0700, the lock file 0600.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace tandem {

class DiskFolder {
 public:
  // `root/name`: makes what is missing (0700), checks root, the folder and
  // its lock file, and takes the lock (FailedPrecondition when another
  // process holds it or a check fails; Unavailable when the file system says no).
  static StatusOr<std::unique_ptr<DiskFolder>> Own(const std::string& root,
                                                   const std::string& name);
  ~DiskFolder();  // releases the lock
  DiskFolder(const DiskFolder&) = delete;
  DiskFolder& operator=(const DiskFolder&) = delete;

  const std::string& path() const { return path_; }

 private:
  DiskFolder(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}

  const std::string path_;
  const int lock_fd_;  // holds the flock while open
};

}  // namespace tandem
