//! The worker's request stream, shared by its serving threads without a
//! hand-over per request.
//!
//! A serving thread with nothing to run waits in an epoll set of its own,
//! in which the stream is registered with `EPOLLEXCLUSIVE`: a request wakes
//! one waiting thread, which reads what has arrived without blocking (under
//! the lock, into a buffer all threads share), takes one frame and runs it.
//! The threads still waiting stay asleep, and one of them wakes if another
//! request arrives meanwhile, so a slow call never holds up the next.
//!
//! Before, one thread sat in a blocking `read` holding the stream's lock
//! and the next waited on that lock, so every request woke two threads
//! (the reader, then the next reader on the lock's release): half of the
//! worker's context switches at one client (issue 26).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use super::protocol::{Envelope, Request, MAX_FRAME};

/// The stream and what was read of it but not yet taken.
pub(super) struct Input {
    stream: OwnedFd,
    pending: Mutex<Pending>,
    /// Written when a whole frame stays in the buffer after one was taken
    /// (the kernel has nothing left to say about it): wakes one waiter.
    nudge: OwnedFd,
}

#[derive(Default)]
struct Pending {
    buf: Vec<u8>,
    /// Where the bytes not yet taken start in `buf`.
    start: usize,
}

impl Input {
    /// The stream `stream` (a socket: it is read with `MSG_DONTWAIT`, so
    /// the descriptor's own flags, shared with the reply stream, stay).
    pub(super) fn new(stream: OwnedFd) -> io::Result<Self> {
        // SAFETY: eventfd only creates a descriptor; no memory is passed.
        let nudge = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if nudge < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Input {
            stream,
            pending: Mutex::new(Pending::default()),
            // SAFETY: `nudge` was just returned by eventfd, is open and
            // owned by nothing else.
            nudge: unsafe { OwnedFd::from_raw_fd(nudge) },
        })
    }

    /// The next request, reading what has arrived without waiting (`None`:
    /// nothing whole has arrived, so [`Waiter::wait`] and look again).
    /// `Err` when the stream ended or broke.
    pub(super) fn next(&self) -> io::Result<Option<Envelope<Request>>> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match pending.take()? {
                Some(envelope) => {
                    if pending.holds_whole_frame() {
                        self.nudge();
                    }
                    return Ok(Some(envelope));
                }
                None => {
                    if !pending.fill(self.stream.as_raw_fd())? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn nudge(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one` to the eventfd this owns.
        unsafe {
            libc::write(
                self.nudge.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

impl Pending {
    fn unread(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn frame_len(&self) -> io::Result<Option<usize>> {
        let unread = self.unread();
        if unread.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([unread[0], unread[1], unread[2], unread[3]]) as usize;
        if len > MAX_FRAME {
            return Err(io::Error::other(format!(
                "a frame of {len} bytes is larger than the protocol's {MAX_FRAME}: the stream is corrupt"
            )));
        }
        Ok(Some(len))
    }

    fn holds_whole_frame(&self) -> bool {
        matches!(self.frame_len(), Ok(Some(len)) if self.unread().len() >= 4 + len)
    }

    /// The first whole frame, decoded, if the buffer holds one.
    fn take(&mut self) -> io::Result<Option<Envelope<Request>>> {
        let Some(len) = self.frame_len()? else {
            return Ok(None);
        };
        if self.unread().len() < 4 + len {
            return Ok(None);
        }
        let body = &self.buf[self.start + 4..self.start + 4 + len];
        let envelope = serde_json::from_slice(body).map_err(io::Error::other)?;
        self.start += 4 + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(envelope))
    }

    /// Read what has arrived, without waiting: `false` when nothing had.
    fn fill(&mut self, fd: RawFd) -> io::Result<bool> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let wanted = match self.frame_len()? {
            Some(len) => (4 + len).saturating_sub(self.buf.len()).max(8192),
            None => 8192,
        };
        self.buf.reserve(wanted);
        let spare = self.buf.spare_capacity_mut();
        loop {
            // SAFETY: `spare` is the vector's unused capacity, valid for
            // writes of `spare.len()` bytes; only what recv reports as
            // written is then counted as initialised.
            let n = unsafe {
                libc::recv(
                    fd,
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                let filled = self.buf.len() + n as usize;
                // SAFETY: recv initialised the first `n` bytes of the spare
                // capacity, so the first `filled` bytes are initialised.
                unsafe { self.buf.set_len(filled) };
                return Ok(true);
            }
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(false),
                _ => return Err(e),
            }
        }
    }
}

/// One serving thread's epoll set: the stream and the nudge, both
/// registered with `EPOLLEXCLUSIVE` (one waiter woken per arrival).
pub(super) struct Waiter<'a> {
    epoll: OwnedFd,
    input: &'a Input,
}

impl<'a> Waiter<'a> {
    pub(super) fn new(input: &'a Input) -> io::Result<Self> {
        // SAFETY: epoll_create1 only creates a descriptor.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `epoll` was just returned by epoll_create1, is open and
        // owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        for fd in [input.stream.as_raw_fd(), input.nudge.as_raw_fd()] {
            let mut event = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
                u64: fd as u64,
            };
            // SAFETY: both descriptors are open (owned by `input`, which
            // outlives this set), and `event` is a valid epoll_event.
            if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) }
                != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Waiter { epoll, input })
    }

    /// Sleep until the stream has something (or a nudge came).
    pub(super) fn wait(&self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 2];
        // SAFETY: `events` is valid for writes of its 2 entries.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                -1,
            )
        };
        let nudge = self.input.nudge.as_raw_fd();
        for event in events.iter().take(n.max(0) as usize) {
            if event.u64 == nudge as u64 {
                let mut count = 0u64;
                // SAFETY: reads 8 bytes into `count` from the eventfd (non-blocking).
                unsafe {
                    libc::read(
                        nudge,
                        (&mut count as *mut u64).cast(),
                        std::mem::size_of::<u64>(),
                    )
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolation::protocol::encode_frame;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn frame(id: u64, body: Request) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_frame(&mut buf, &Envelope { id, body }).unwrap();
        buf
    }

    #[test]
    fn frames_split_and_joined_arrive_whole_in_order_and_the_end_is_an_error() {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let input = Input::new(OwnedFd::from(theirs)).unwrap();
        let ids = |input: &Input| -> Vec<u64> {
            let mut seen = Vec::new();
            while let Ok(Some(e)) = input.next() {
                seen.push(e.id);
            }
            seen
        };
        assert!(matches!(input.next(), Ok(None)));
        // Two frames in one write, then one split across two.
        let mut both = frame(1, Request::Check { tool: "a".into() });
        both.extend(frame(2, Request::Check { tool: "b".into() }));
        ours.write_all(&both).unwrap();
        assert_eq!(ids(&input), [1, 2]);
        let third = frame(3, Request::Check { tool: "c".into() });
        ours.write_all(&third[..6]).unwrap();
        assert!(ids(&input).is_empty());
        ours.write_all(&third[6..]).unwrap();
        assert_eq!(ids(&input), [3]);
        // An unanswered frame (id 0) comes out as any other, in order.
        let mut forget = frame(0, Request::ForgetTurn { turn: 9 });
        forget.extend(frame(4, Request::Check { tool: "d".into() }));
        ours.write_all(&forget).unwrap();
        let next = input.next();
        assert!(matches!(
            next,
            Ok(Some(Envelope {
                id: 0,
                body: Request::ForgetTurn { turn: 9 }
            }))
        ));
        assert!(matches!(input.next(), Ok(Some(e)) if e.id == 4));
        drop(ours);
        let ended = input.next();
        assert!(matches!(ended, Err(e) if e.kind() == io::ErrorKind::UnexpectedEof));
    }

    #[test]
    fn a_frame_left_buffered_nudges_one_waiter_and_a_corrupt_length_is_an_error() {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let input = Input::new(OwnedFd::from(theirs)).unwrap();
        let waiter = Waiter::new(&input).unwrap();
        let mut both = frame(1, Request::Check { tool: "a".into() });
        both.extend(frame(2, Request::Check { tool: "b".into() }));
        ours.write_all(&both).unwrap();
        assert!(matches!(input.next(), Ok(Some(e)) if e.id == 1));
        // The kernel has nothing more; the nudge makes the wait return.
        waiter.wait();
        assert!(matches!(input.next(), Ok(Some(e)) if e.id == 2));
        ours.write_all(&[0xff, 0xff, 0xff, 0xff]).unwrap();
        assert!(input.next().is_err());
    }
}
