// `trainctl local`'s relay of the ranks' output: each line of rank N's stdout and stderr goes to
// trainctl's own with a '[rN] ' prefix, very long lines in pieces, and a reader that went away
// (`| head`) closes the ranks' pipes too.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "local_supervisor.h"

namespace train::detail {

void write_all(int fd, const std::string& data, bool& broken) {
  std::size_t done = 0;
  while (!broken && done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      (void)poll(&p, 1, 100);
    } else {
      broken = true;  // reader gone (EPIPE): drop output, keep supervising the ranks
    }
  }
}

void say(const std::string& message) {
  bool broken = false;
  write_all(STDERR_FILENO, "trainctl: " + message + "\n", broken);
}

void Supervisor::relay(Stream& s, const char* data, std::size_t n) {
  bool& broken = s.target == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
  s.pending.append(data, n);
  std::size_t start = 0;
  std::string batch;
  for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (!s.mid_line) batch += s.prefix;
    batch.append(s.pending, start, nl + 1 - start);
    s.mid_line = false;
  }
  s.pending.erase(0, start);
  if (s.pending.size() >= kMaxLineBytes) {
    if (!s.mid_line) batch += s.prefix;
    batch += s.pending;
    s.pending.clear();
    s.mid_line = true;
  }
  if (!batch.empty()) write_all(s.target, batch, broken);
  if (broken) drop_streams_to(s.target);
}

void Supervisor::drop_streams_to(int target) {
  for (Rank& rank : ranks_) {
    for (Stream* s : {&rank.out, &rank.err}) {
      if (s->target == target && s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
        s->pending.clear();
      }
    }
  }
}

void Supervisor::close_stream(Stream& s) {
  if (s.fd < 0) return;
  if (!s.pending.empty()) {
    bool& broken = s.target == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
    write_all(s.target, (s.mid_line ? "" : s.prefix) + s.pending + "\n", broken);
    s.pending.clear();
  } else if (s.mid_line) {
    bool& broken = s.target == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
    write_all(s.target, "\n", broken);
  }
  close(s.fd);
  s.fd = -1;
}

void Supervisor::read_stream(Stream& s) {
  char buffer[kReadChunk];
  while (s.fd >= 0) {
    const ssize_t n = read(s.fd, buffer, sizeof(buffer));
    if (n > 0) {
      relay(s, buffer, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < sizeof(buffer)) return;
    } else if (n == 0) {
      close_stream(s);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN) {
      return;
    } else {
      close_stream(s);
    }
  }
}

}  // namespace train::detail
