//! `network: [hosts]`: the worker's network namespace has no way out but
//! a proxy plughost runs, which connects only to the hosts listed.
//!
//! The child, once in its new namespace, listens on its own loopback
//! ([`PORT`]) and hands that listening socket to plughost over a socket
//! pair ([`ChildEnd::hand_over`]) before `exec`; plughost accepts on it
//! ([`Pending::start`]), so the proxy runs outside the plugin's reach and
//! the connections it makes leave from plughost's network. The worker is
//! given `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` (and their lowercase
//! forms; `NO_PROXY` is removed), which Python's `urllib`, `requests`,
//! `httpx` and `aiohttp(trust_env=True)` follow. The proxy speaks HTTP:
//! `CONNECT host:port` (HTTPS and any TCP) and plain `GET http://…`
//! requests. A host not allowed is answered `403 Forbidden` naming the
//! rule, and logged once per host; a direct connection that bypasses the
//! proxy is refused by the empty namespace.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The proxy's port on the worker's own loopback (the namespace is new:
/// nothing else listens there).
pub const PORT: u16 = 3128;

/// Variables that would let a client skip the proxy.
pub const NO_PROXY: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// The worker's proxy variables.
pub fn environment() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{PORT}");
    [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k, url.clone()))
    .collect()
}

/// plughost's end, until the child has handed its listening socket over.
pub struct Pending {
    key: String,
    hosts: Arc<Vec<String>>,
    ours: OwnedFd,
}

/// The child's end of the socket pair.
pub struct ChildEnd {
    theirs: OwnedFd,
}

/// A running proxy; [`Running::stop`] ends it.
pub struct Running {
    listener: Arc<TcpListener>,
}

/// A socket pair for the hand-over of the worker of plugin `key`.
pub fn prepare(key: &str, hosts: Vec<String>) -> Result<(Pending, ChildEnd), String> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "cannot make the proxy's socket pair: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((
        Pending {
            key: key.to_string(),
            hosts: Arc::new(hosts),
            ours,
        },
        ChildEnd { theirs },
    ))
}

impl ChildEnd {
    /// In the child (between fork and exec, inside its network
    /// namespace): listen on the loopback and send the socket to plughost.
    pub fn hand_over(&self) -> std::io::Result<()> {
        // SAFETY: socket/setsockopt/bind/listen/sendmsg/close on
        // descriptors and stack buffers owned here; all async-signal-safe.
        unsafe {
            let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if s < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_port = PORT.to_be();
            addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::bind(s, (&addr as *const libc::sockaddr_in).cast(), len) != 0
                || libc::listen(s, 128) != 0
            {
                let e = std::io::Error::last_os_error();
                libc::close(s);
                return Err(e);
            }
            // (u64s: the control buffer must be aligned for cmsghdr)
            let mut space = [0u64; 8];
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = space.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), s);
            let sent = libc::sendmsg(self.theirs.as_raw_fd(), &msg, 0);
            let e = std::io::Error::last_os_error();
            libc::close(s);
            if sent < 0 {
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Pending {
    /// After the spawn: receive the listening socket and serve it.
    pub fn start(self) -> Result<Running, String> {
        let fd = receive_fd(&self.ours)
            .map_err(|e| format!("the proxy's socket did not arrive: {e}"))?;
        let listener = Arc::new(TcpListener::from(fd));
        let serving = listener.clone();
        let (key, hosts) = (self.key, self.hosts);
        let logged = Arc::new(Mutex::new(HashSet::new()));
        std::thread::Builder::new()
            .name(format!("plughost-proxy-{key}"))
            .spawn(move || {
                for conn in serving.incoming() {
                    let Ok(conn) = conn else { break };
                    let (key, hosts, logged) = (key.clone(), hosts.clone(), logged.clone());
                    let _ = std::thread::Builder::new()
                        .name("plughost-proxy-conn".into())
                        .spawn(move || {
                            let _ = serve(conn, &key, &hosts, &logged);
                        });
                }
            })
            .map_err(|e| format!("cannot start the proxy: {e}"))?;
        Ok(Running { listener })
    }
}

impl Running {
    /// Stop accepting (the worker ended); connections in flight finish.
    pub fn stop(&self) {
        // SAFETY: shutdown on the listener's own descriptor wakes the
        // accept loop (it then fails and the thread ends).
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

fn receive_fd(ours: &OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: recvmsg into stack buffers owned here; the descriptor taken
    // from SCM_RIGHTS is new and owned by nothing else.
    unsafe {
        let timeout = libc::timeval {
            tv_sec: 10,
            tv_usec: 0,
        };
        libc::setsockopt(
            ours.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        // (u64s: the control buffer must be aligned for cmsghdr)
        let mut space = [0u64; 8];
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&space) as _;
        if libc::recvmsg(ours.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            return Err(std::io::Error::other("no descriptor in the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Whether `host:port` is allowed by `rules` (`host`, `*.domain`,
/// `host:port`; names compared without case).
pub fn allowed(host: &str, port: u16, rules: &[String]) -> bool {
    let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
    rules.iter().any(|rule| {
        let rule = rule.to_ascii_lowercase();
        let (pattern, want_port) = match rule.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') || h.ends_with(']') => {
                (h.to_string(), p.parse::<u16>().ok())
            }
            _ => (rule.clone(), None),
        };
        let pattern = pattern.trim_matches(['[', ']']);
        let host_ok = match pattern.strip_prefix("*.") {
            Some(domain) => host.ends_with(&format!(".{domain}")),
            None => host == pattern,
        };
        host_ok && want_port.is_none_or(|p| p == port)
    })
}

/// One client connection: read the request head, check the target, then
/// relay.
fn serve(
    client: TcpStream,
    key: &str,
    rules: &[String],
    logged: &Mutex<HashSet<String>>,
) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || head.len() > 64 {
            return Ok(());
        }
        let end = line == "\r\n" || line == "\n";
        head.push(line);
        if end {
            break;
        }
    }
    let mut client = client;
    let first: Vec<&str> = head[0].split_whitespace().collect();
    let [method, target, version] = first[..] else {
        return reply(
            &mut client,
            "400 Bad Request",
            "plughost sandbox proxy: bad request\n",
        );
    };
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let (authority, path) = if connect {
        (target.to_string(), String::new())
    } else if let Some(rest) = target.strip_prefix("http://") {
        match rest.find('/') {
            Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
            None => (rest.to_string(), "/".to_string()),
        }
    } else {
        return reply(
            &mut client,
            "400 Bad Request",
            "plughost sandbox proxy: only CONNECT and http:// requests\n",
        );
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.parse().unwrap_or(80)),
        _ => (authority.clone(), if connect { 443 } else { 80 }),
    };
    if !allowed(&host, port, rules) {
        let message = format!(
            "plughost sandbox: plugin '{key}' may not connect to {host}:{port} (its sandbox's network allows only {})\n",
            rules.join(", ")
        );
        if logged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(format!("{host}:{port}"))
        {
            tracing::warn!("{}", message.trim_end());
        }
        return reply(&mut client, "403 Forbidden", &message);
    }
    let upstream = match connect_to(&host, port) {
        Ok(s) => s,
        Err(e) => {
            return reply(
                &mut client,
                "502 Bad Gateway",
                &format!("plughost sandbox proxy: cannot reach {host}:{port}: {e}\n"),
            )
        }
    };
    let mut up = upstream.try_clone()?;
    if connect {
        client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")?;
    } else {
        let mut out = format!("{method} {path} {version}\r\n");
        for line in &head[1..] {
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("proxy-") {
                continue;
            }
            out.push_str(line);
        }
        up.write_all(out.as_bytes())?;
    }
    // What the reader already buffered belongs to the upstream.
    let buffered = reader.buffer().to_vec();
    up.write_all(&buffered)?;
    client.set_read_timeout(None)?;
    let mut client_read = reader.into_inner();
    let mut client_write = client;
    let mut up_read = upstream;
    let forward = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_read, &mut up);
        let _ = up.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut up_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Both);
    let _ = forward.join();
    Ok(())
}

fn connect_to(host: &str, port: u16) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::other("no address");
    for addr in (host.trim_matches(['[', ']']), port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn reply(client: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(text.as_bytes())?;
    let _ = client.shutdown(Shutdown::Write);
    // Let the client read the answer before the socket closes.
    let _ = client.read(&mut [0u8; 1]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn hosts_patterns_and_ports() {
        let rules = [
            "api.example.com".to_string(),
            "*.example.org".into(),
            "127.0.0.1:8080".into(),
        ];
        assert!(allowed("api.example.com", 443, &rules));
        assert!(allowed("API.example.com", 80, &rules));
        assert!(allowed("a.b.example.org", 443, &rules));
        assert!(!allowed("example.org", 443, &rules));
        assert!(!allowed("evil-example.org", 443, &rules));
        assert!(allowed("127.0.0.1", 8080, &rules));
        assert!(!allowed("127.0.0.1", 8081, &rules));
        assert!(!allowed("localhost", 8080, &rules));
    }
}
