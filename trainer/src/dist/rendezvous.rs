//! The rendezvous: rank 0 hands a few bytes (NCCL's unique id) to every other rank over TCP
//! at `MASTER_ADDR:MASTER_PORT`, checking on the way that the job is put together right.
//!
//! Wire format, little-endian. A rank r > 0 connects and greets with
//! `MAGIC, version u32, rank u32, world u32`; once all ranks are in, rank 0 answers each with
//! `MAGIC, version u32, status u8, length u32, body`: the payload when status is `OK`, a
//! UTF-8 reason when it refused the rank or gave up. Every wait has a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::DistEnv;
use crate::{Result, TrainError};

/// Bumped whenever the wire format changes, so mismatched builds fail with a clear error.
pub const PROTOCOL_VERSION: u32 = 1;
const MAGIC: [u8; 8] = *b"OCTETRDV";
const HELLO_LEN: usize = 20;
const OK: u8 = 0;
const REFUSED: u8 = 1;
/// Far above NCCL's 128-byte id; bounds what a confused peer can make us allocate.
const MAX_BODY: usize = 1 << 20;
/// How long rank 0 waits for the greeting of a connection before dropping it, so a silent
/// stranger cannot hold up the ranks queued behind it for long.
const GREETING_WAIT: Duration = Duration::from_secs(2);
const RETRY_EVERY: Duration = Duration::from_millis(50);

/// Rank 0 sends `payload` (which it must pass) to all other ranks; every rank returns it.
/// Returns only when all `world` ranks have arrived, so it is also a barrier. Fails with a
/// reason — never hangs — when `timeout` passes before that, the port is taken, the address
/// does not resolve, a rank is duplicated, the world sizes differ or a peer speaks another
/// protocol; rank 0 passes its reason on to the ranks already connected.
pub fn share_bytes(env: &DistEnv, payload: Option<&[u8]>, timeout: Duration) -> Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    if env.rank != 0 {
        return receive(env, timeout, deadline);
    }
    let payload = payload
        .ok_or_else(|| dist("rank 0 must provide the bytes to share in the rendezvous".into()))?;
    if payload.len() > MAX_BODY {
        return Err(dist(format!(
            "rendezvous payload of {} bytes exceeds the {MAX_BODY}-byte limit",
            payload.len()
        )));
    }
    if env.world == 1 {
        return Ok(payload.to_vec());
    }
    serve(env, payload, timeout, deadline)
}

/// Waits until every rank has called `barrier` (an empty [`share_bytes`]).
pub fn barrier(env: &DistEnv, timeout: Duration) -> Result<()> {
    share_bytes(env, Some(&[]), timeout).map(drop)
}

fn dist(msg: String) -> TrainError {
    TrainError::Dist(msg)
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Socket timeouts must be non-zero.
fn at_least_1ms(d: Duration) -> Duration {
    d.max(Duration::from_millis(1))
}

fn endpoint(env: &DistEnv) -> String {
    format!("{}:{}", env.master_addr, env.master_port)
}

/// Resolves `MASTER_ADDR`. `getaddrinfo` cannot be cancelled, so a name is looked up on a
/// helper thread that we stop waiting for at the deadline.
fn resolve(env: &DistEnv, timeout: Duration, deadline: Instant) -> Result<Vec<SocketAddr>> {
    let host = env
        .master_addr
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = env.master_port;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let (tx, rx) = mpsc::channel();
    let name = host.clone();
    std::thread::spawn(move || {
        let r = (name.as_str(), port)
            .to_socket_addrs()
            .map(|a| a.collect::<Vec<_>>());
        let _ = tx.send(r);
    });
    match rx.recv_timeout(remaining(deadline)) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => Err(dist(format!(
            "MASTER_ADDR '{host}' resolves to no address: set it to rank 0's host name or IP"
        ))),
        Ok(Err(e)) => Err(dist(format!(
            "MASTER_ADDR '{host}' does not resolve ({e}): set it to rank 0's host name or IP"
        ))),
        Err(_) => Err(dist(format!(
            "MASTER_ADDR '{host}' did not resolve within {timeout:?}: set it to rank 0's IP"
        ))),
    }
}

/// Where rank 0 listens, given `MASTER_ADDR` and its addresses here: on those addresses when
/// `MASTER_ADDR` is loopback (a job on this machine alone), else on every interface of the
/// address family. A host name often resolves to a loopback address on its own machine
/// (Debian's `127.0.1.1 gpu01` line) while the other machines reach it by its network address.
pub fn listen_addrs(master_addr: &str, resolved: &[SocketAddr]) -> Vec<SocketAddr> {
    let host = master_addr.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match resolved.first() {
        Some(first) if !loopback => {
            let any: IpAddr = if first.is_ipv4() {
                Ipv4Addr::UNSPECIFIED.into()
            } else {
                Ipv6Addr::UNSPECIFIED.into()
            };
            vec![SocketAddr::new(any, first.port())]
        }
        _ => resolved.to_vec(),
    }
}

fn bind(env: &DistEnv, addrs: &[SocketAddr]) -> Result<TcpListener> {
    let listen = listen_addrs(&env.master_addr, addrs);
    if listen != addrs {
        // Listening everywhere must not hide a MASTER_ADDR that names another machine.
        let here: Vec<SocketAddr> = addrs.iter().map(|a| SocketAddr::new(a.ip(), 0)).collect();
        TcpListener::bind(&here[..]).map_err(|e| bind_error(env, e))?;
    }
    TcpListener::bind(&listen[..]).map_err(|e| bind_error(env, e))
}

fn bind_error(env: &DistEnv, e: std::io::Error) -> TrainError {
    let (addr, port) = (&env.master_addr, env.master_port);
    dist(match e.kind() {
        ErrorKind::AddrInUse => format!(
            "MASTER_PORT {port} on {addr} is in use: pick another with --master-port or \
                 MASTER_PORT"
        ),
        ErrorKind::AddrNotAvailable => format!(
            "MASTER_ADDR {addr} is not an address of this machine: rank 0 listens there, so \
                 start rank 0 on that machine or set MASTER_ADDR to one of its addresses"
        ),
        ErrorKind::PermissionDenied => format!(
            "rank 0 may not listen on MASTER_PORT {port} (ports below 1024 need privileges): \
                 pick another with --master-port or MASTER_PORT"
        ),
        _ => format!("rank 0 cannot listen on {addr}:{port}: {e}"),
    })
}

/// What rank 0 learnt from one connection.
enum Greeting {
    Rank {
        rank: usize,
        world: usize,
    },
    /// Closed or silent before greeting: a port probe, or a peer that died. Ignored.
    Silent(String),
    /// Not our protocol, or another version of it: the job is misconfigured.
    Foreign(String),
}

fn read_greeting(s: &mut TcpStream, from: SocketAddr, deadline: Instant) -> Greeting {
    let mut hello = [0u8; HELLO_LEN];
    let wait = at_least_1ms(remaining(deadline).min(GREETING_WAIT));
    let read = s
        .set_nonblocking(false)
        .and_then(|()| s.set_read_timeout(Some(wait)))
        .and_then(|()| s.read_exact(&mut hello));
    if let Err(e) = read {
        return Greeting::Silent(format!("{from} connected but sent no greeting ({e})"));
    }
    let word = |i: usize| u32::from_le_bytes(hello[i..i + 4].try_into().unwrap());
    if hello[..8] != MAGIC {
        return Greeting::Foreign(format!(
            "a program at {from} connected to the rendezvous port but does not speak octet's \
             rendezvous protocol: is another job using this port? Pick another with \
             --master-port or MASTER_PORT"
        ));
    }
    if word(8) != PROTOCOL_VERSION {
        return Greeting::Foreign(format!(
            "the process at {from} speaks rendezvous protocol version {}, rank 0 version \
             {PROTOCOL_VERSION}: run the same octet build on every rank",
            word(8)
        ));
    }
    Greeting::Rank {
        rank: word(12) as usize,
        world: word(16) as usize,
    }
}

fn reply(s: &mut TcpStream, status: u8, body: &[u8], deadline: Instant) -> std::io::Result<()> {
    let mut msg = Vec::with_capacity(17 + body.len());
    msg.extend_from_slice(&MAGIC);
    msg.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    msg.push(status);
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(body);
    // Answering must not wait on a stuck peer for long, even after the deadline.
    s.set_write_timeout(Some(at_least_1ms(remaining(deadline)).max(GREETING_WAIT)))?;
    s.write_all(&msg)?;
    s.flush()
}

/// Rank 0: accepts `world - 1` ranks, then answers them all with the payload.
fn serve(env: &DistEnv, payload: &[u8], timeout: Duration, deadline: Instant) -> Result<Vec<u8>> {
    let addrs = resolve(env, timeout, deadline)?;
    let listener = bind(env, &addrs)?;
    // Non-blocking accept, polled, so the deadline is always honoured.
    listener
        .set_nonblocking(true)
        .map_err(|e| dist(format!("rendezvous socket: {e}")))?;
    let mut peers: Vec<Option<(TcpStream, SocketAddr)>> = (0..env.world).map(|_| None).collect();
    let mut joined = 1;
    let mut silent = Vec::new();
    // Tells every connected rank why rank 0 gives up, then returns that reason.
    let abort = |peers: &mut Vec<Option<(TcpStream, SocketAddr)>>, why: String| {
        let relayed = format!("rank 0 stopped the rendezvous: {why}");
        for (s, _) in peers.iter_mut().flatten() {
            let _ = reply(s, REFUSED, relayed.as_bytes(), deadline);
        }
        Err(dist(why))
    };
    while joined < env.world {
        let (mut s, from) = match listener.accept() {
            Ok(c) => c,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (1..env.world)
                        .filter(|&r| peers[r].is_none())
                        .map(|r| r.to_string())
                        .collect();
                    let mut why = format!(
                        "rendezvous at {} timed out after {timeout:?}: rank{} {} of {} never \
                         arrived. Did every rank start, with the same MASTER_ADDR and \
                         MASTER_PORT?{}",
                        endpoint(env),
                        if missing.len() == 1 { "" } else { "s" },
                        missing.join(", "),
                        env.world,
                        env.start_hint()
                    );
                    if !silent.is_empty() {
                        why.push_str(&format!(" (also: {})", silent.join("; ")));
                    }
                    return abort(&mut peers, why);
                }
                std::thread::sleep(Duration::from_millis(5).min(remaining(deadline)));
                continue;
            }
            Err(e) => return abort(&mut peers, format!("rendezvous accept failed: {e}")),
        };
        let (rank, world) = match read_greeting(&mut s, from, deadline) {
            Greeting::Rank { rank, world } => (rank, world),
            Greeting::Silent(note) => {
                silent.push(note);
                continue;
            }
            Greeting::Foreign(why) => {
                let _ = reply(&mut s, REFUSED, why.as_bytes(), deadline);
                return abort(&mut peers, why);
            }
        };
        let refusal = if world != env.world {
            Some(format!(
                "rank {rank} at {from} has WORLD_SIZE {world} but rank 0 has {}: start every \
                 rank with the same WORLD_SIZE",
                env.world
            ))
        } else if rank == 0 || rank >= env.world {
            Some(format!(
                "the process at {from} says RANK={rank}, but rank 0 is at {} and ranks of \
                 WORLD_SIZE {} run 1..{}: give every process its own RANK",
                endpoint(env),
                env.world,
                env.world - 1
            ))
        } else if let Some((_, first)) = &peers[rank] {
            Some(format!(
                "rank {rank} joined twice (from {first} and {from}): give every process its own \
                 RANK"
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            let _ = reply(&mut s, REFUSED, why.as_bytes(), deadline);
            return abort(&mut peers, why);
        }
        peers[rank] = Some((s, from));
        joined += 1;
    }
    // Stop listening before answering: a fast rank's next rendezvous on this port must wait
    // for our next listener, not queue on this one.
    drop(listener);
    let mut failed = Vec::new();
    for (rank, peer) in peers.iter_mut().enumerate() {
        if let Some((s, from)) = peer {
            if let Err(e) = reply(s, OK, payload, deadline) {
                failed.push(format!("rank {rank} at {from}: {e}"));
            }
        }
    }
    if !failed.is_empty() {
        return Err(dist(format!(
            "rendezvous: could not send to {}",
            failed.join("; ")
        )));
    }
    Ok(payload.to_vec())
}

/// Why one attempt of a rank > 0 ended without the payload.
enum Attempt {
    /// Connection closed before any answer (rank 0 restarting, or a listener going away):
    /// try again until the deadline.
    Retry(String),
    Fail(String),
}

/// Rank > 0: connects (retrying until rank 0 listens), greets, waits for the payload.
fn receive(env: &DistEnv, timeout: Duration, deadline: Instant) -> Result<Vec<u8>> {
    let addrs = resolve(env, timeout, deadline)?;
    let mut last = String::from("no attempt finished");
    loop {
        for a in &addrs {
            let wait = remaining(deadline);
            if wait.is_zero() {
                return Err(dist(format!(
                    "rank {} could not reach rank 0 at {} within {timeout:?} ({last}): is rank 0 \
                     running, and do all ranks have the same MASTER_ADDR and MASTER_PORT?",
                    env.rank,
                    endpoint(env)
                )));
            }
            match TcpStream::connect_timeout(a, wait.min(Duration::from_secs(1))) {
                Ok(s) => match exchange(s, env, timeout, deadline) {
                    Ok(payload) => return Ok(payload),
                    Err(Attempt::Retry(why)) => last = why,
                    Err(Attempt::Fail(why)) => return Err(dist(why)),
                },
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        std::thread::sleep(RETRY_EVERY.min(remaining(deadline)));
    }
}

fn exchange(
    mut s: TcpStream,
    env: &DistEnv,
    timeout: Duration,
    deadline: Instant,
) -> std::result::Result<Vec<u8>, Attempt> {
    let at = endpoint(env);
    let mut hello = Vec::with_capacity(HELLO_LEN);
    hello.extend_from_slice(&MAGIC);
    for w in [PROTOCOL_VERSION, env.rank as u32, env.world as u32] {
        hello.extend_from_slice(&w.to_le_bytes());
    }
    let sent = s
        .set_write_timeout(Some(at_least_1ms(remaining(deadline))))
        .and_then(|()| s.write_all(&hello));
    if let Err(e) = sent {
        return Err(Attempt::Retry(format!("greeting {at}: {e}")));
    }
    // The answer comes once every rank is in: wait for it up to the deadline.
    let _ = s.set_read_timeout(Some(at_least_1ms(remaining(deadline))));
    let mut head = [0u8; 17];
    if let Err(e) = s.read_exact(&mut head) {
        return Err(match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Attempt::Fail(format!(
                "rank {} reached {at} but got no answer within {timeout:?}: other ranks \
                 never arrived, or another program listens on MASTER_PORT",
                env.rank
            )),
            _ => Attempt::Retry(format!("{at} closed the connection unanswered ({e})")),
        });
    }
    if head[..8] != MAGIC {
        return Err(Attempt::Fail(format!(
            "{at} answered rank {}, but not in octet's rendezvous protocol: another program is \
             using MASTER_PORT {}? Pick another with --master-port or MASTER_PORT",
            env.rank, env.master_port
        )));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
    if version != PROTOCOL_VERSION {
        return Err(Attempt::Fail(format!(
            "rank 0 at {at} speaks rendezvous protocol version {version}, rank {} version \
             {PROTOCOL_VERSION}: run the same octet build on every rank",
            env.rank
        )));
    }
    let len = u32::from_le_bytes(head[13..17].try_into().unwrap()) as usize;
    if len > MAX_BODY {
        return Err(Attempt::Fail(format!(
            "rank 0 at {at} announced a {len}-byte rendezvous message, over the \
             {MAX_BODY}-byte limit"
        )));
    }
    let mut body = vec![0u8; len];
    if let Err(e) = s.read_exact(&mut body) {
        return Err(Attempt::Fail(format!(
            "rank {}: the answer from rank 0 at {at} was cut short: {e}",
            env.rank
        )));
    }
    match head[12] {
        OK => Ok(body),
        REFUSED => Err(Attempt::Fail(format!(
            "rank {} (from rank 0 at {at}): {}",
            env.rank,
            String::from_utf8_lossy(&body)
        ))),
        other => Err(Attempt::Fail(format!(
            "rank 0 at {at} answered with unknown status {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A newer (or older) build greeting rank 0 is refused on both sides, by version.
    #[test]
    fn other_protocol_version_is_refused_with_versions_named() {
        let port = crate::dist::free_local_port().unwrap();
        let root = DistEnv {
            world: 2,
            master_port: port,
            ..DistEnv::single()
        };
        let server = std::thread::spawn(move || {
            share_bytes(&root, Some(b"id"), Duration::from_secs(3)).unwrap_err()
        });
        let mut s = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let mut hello = MAGIC.to_vec();
        for w in [PROTOCOL_VERSION + 1, 1, 2] {
            hello.extend_from_slice(&w.to_le_bytes());
        }
        s.write_all(&hello).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        assert_eq!(&answer[..8], &MAGIC);
        assert_eq!(answer[12], REFUSED);
        let text = String::from_utf8_lossy(&answer[17..]).to_string();
        assert!(text.contains("protocol version 2"), "{text}");
        let e = server.join().unwrap().to_string();
        assert!(e.contains("version 2, rank 0 version 1"), "{e}");
    }
}
