// The floor of a proxy's cost per transaction, for the bench's `cpu` phase: a relay that
// does nothing but move bytes. One thread, one level-triggered epoll set, one backend
// connection per client opened when the client connects, no parsing, no pooling, no
// timers: per round trip it makes the system calls any proxy must make (a read and a
// write each way, and its share of epoll_wait). What it costs is what PgBouncer or
// splitpoint could cost at best on this machine.
//
//   relay LISTEN_PORT BACKEND_PORT     (both on 127.0.0.1)
//
// Bench tool only: writes block (the sockets stay blocking; epoll only says when a read
// will not), a failed connect or a short read ends the pair.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

sockaddr_in local(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

void watch(int ep, int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

bool write_all(int fd, const char* p, ssize_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, static_cast<size_t>(n));
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: relay LISTEN_PORT BACKEND_PORT\n");
    return 2;
  }
  const sockaddr_in listen_at = local(std::atoi(argv[1]));
  const sockaddr_in backend = local(std::atoi(argv[2]));
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, reinterpret_cast<const sockaddr*>(&listen_at), sizeof listen_at) != 0 || listen(lfd, 1024) != 0) {
    std::perror("relay: listen");
    return 1;
  }
  const int ep = epoll_create1(0);
  epoll_event lev{};
  lev.events = EPOLLIN;
  lev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);

  std::vector<int> peer(1 << 16, -1);  // fd -> the other end of its pair
  std::vector<char> buf(1 << 16);
  epoll_event events[256];
  for (;;) {
    const int n = epoll_wait(ep, events, 256, -1);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == lfd) {
        const int c = accept(lfd, nullptr, nullptr);
        if (c < 0) continue;
        const int b = socket(AF_INET, SOCK_STREAM, 0);
        if (c >= static_cast<int>(peer.size()) || b < 0 || b >= static_cast<int>(peer.size()) ||
            connect(b, reinterpret_cast<const sockaddr*>(&backend), sizeof backend) != 0) {
          close(c);
          if (b >= 0) close(b);
          continue;
        }
        peer[c] = b;
        peer[b] = c;
        watch(ep, c);
        watch(ep, b);
        continue;
      }
      const int other = peer[fd];
      if (other < 0) continue;  // its pair ended earlier in this batch
      const ssize_t r = read(fd, buf.data(), buf.size());
      if (r > 0 && write_all(other, buf.data(), r)) continue;
      peer[fd] = peer[other] = -1;
      close(fd);
      close(other);
    }
  }
}
