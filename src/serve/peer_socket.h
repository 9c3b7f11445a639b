// Noticing that a client went away while its non-streaming request is still computing. cpp-httplib gives a handler
// the peer's address but not its socket, so the socket is found among the process's descriptors by its peer
// address (the connection stays open, and its descriptor valid, until the handler returns); a closed peer shows as
// end-of-stream on it. Linux only; where the socket is not found the request simply runs to its end or deadline.
#pragma once

#include <string>

namespace vlm::serve {

// The descriptor of the connected TCP socket whose peer is remote_addr:remote_port and whose local port is
// `local_port`, or -1.
int find_peer_socket(const std::string& remote_addr, int remote_port, int local_port);
// True when the peer closed its side (or the socket failed); data waiting to be read does not count.
bool peer_closed(int fd);

}  // namespace vlm::serve
