// When this process started (Unix seconds): servers export it in /metrics as
// tandem_process_start_time_seconds, so a client can tell a process that was
// restarted from one that stayed up.
#pragma once

namespace tandem {

double ProcessStartUnixSeconds();

}  // namespace tandem
