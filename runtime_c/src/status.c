/* The thread's last error message and status names. */
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[1024];

const char *tccrt_last_error(void) { return last_error; }

tccrt_status_t tccrt_fail(tccrt_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  /* The message is one line even when it quotes a corrupted name. */
  for (char *p = last_error; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  return status;
}

const char *tccrt_status_string(tccrt_status_t status) {
  switch (status) {
    case TCCRT_OK: return "ok";
    case TCCRT_INVALID_ARGUMENT: return "invalid argument";
    case TCCRT_IO_ERROR: return "i/o error";
    case TCCRT_INVALID_PACK: return "invalid pack";
    case TCCRT_OUT_OF_MEMORY: return "out of memory";
    case TCCRT_INVALID_INPUT: return "invalid input";
    case TCCRT_KERNEL_ERROR: return "kernel error";
  }
  return "unknown status";
}
