//! The rendezvous with threads as ranks on 127.0.0.1: the payload reaches everyone, and each
//! way of getting a job wrong fails fast with a reason on every side.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use octet_trainer::dist::{barrier, free_local_port, share_bytes, DistEnv};
use octet_trainer::TrainError;

fn free_port() -> u16 {
    free_local_port().unwrap()
}

fn rank(rank: usize, world: usize, port: u16) -> DistEnv {
    DistEnv {
        rank,
        world,
        local_rank: rank,
        master_port: port,
        ..DistEnv::single()
    }
}

/// Runs one thread per env, rank 0 sharing `payload`; the results in the order given.
fn run_ranks(
    envs: Vec<DistEnv>,
    payload: &[u8],
    timeout: Duration,
) -> Vec<Result<Vec<u8>, String>> {
    let handles: Vec<_> = envs
        .into_iter()
        .map(|e| {
            let p = payload.to_vec();
            thread::spawn(move || {
                share_bytes(&e, (e.rank == 0).then_some(&p[..]), timeout).map_err(|e| {
                    assert!(matches!(e, TrainError::Dist(_)), "{e:?}");
                    e.to_string()
                })
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn four_ranks_receive_the_payload() {
    let port = free_port();
    let id: Vec<u8> = (0..128u32).map(|i| (i * 37 % 251) as u8).collect();
    // Others start before rank 0 listens: they retry until it does.
    let mut envs: Vec<DistEnv> = (1..4).map(|r| rank(r, 4, port)).collect();
    envs.push(rank(0, 4, port));
    let start = Instant::now();
    let handles: Vec<_> = envs
        .into_iter()
        .map(|e| {
            let id = id.clone();
            thread::spawn(move || {
                if e.rank == 0 {
                    thread::sleep(Duration::from_millis(300));
                }
                share_bytes(&e, (e.rank == 0).then_some(&id[..]), Duration::from_secs(5))
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap().unwrap(), id);
    }
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn barrier_twice_on_one_port() {
    let port = free_port();
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let e = rank(r, 3, port);
            thread::spawn(move || {
                barrier(&e, Duration::from_secs(5))?;
                barrier(&e, Duration::from_secs(5))?;
                share_bytes(
                    &e,
                    (e.rank == 0).then_some(&b"third"[..]),
                    Duration::from_secs(5),
                )
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap().unwrap(), b"third");
    }
}

#[test]
fn single_rank_needs_no_network() {
    let e = DistEnv::single();
    assert_eq!(share_bytes(&e, Some(b"x"), Duration::ZERO).unwrap(), b"x");
    let e = share_bytes(&rank(0, 2, 1), None, Duration::ZERO).unwrap_err();
    assert!(e.to_string().contains("rank 0 must provide"), "{e}");
}

#[test]
fn missing_ranks_time_out_and_are_listed() {
    let port = free_port();
    let start = Instant::now();
    let envs = vec![rank(0, 5, port), rank(1, 5, port), rank(3, 5, port)];
    let r = run_ranks(envs, b"id", Duration::from_millis(800));
    assert!(start.elapsed() < Duration::from_secs(3));
    let root = r[0].as_ref().unwrap_err();
    assert!(root.contains("ranks 2, 4 of 5 never arrived"), "{root}");
    // The ranks that did arrive learn why from rank 0.
    for peer in &r[1..] {
        let e = peer.as_ref().unwrap_err();
        assert!(
            e.contains("rank 0 stopped the rendezvous") && e.contains("2, 4 of 5"),
            "{e}"
        );
    }
    let r = run_ranks(
        vec![rank(0, 2, free_port())],
        b"id",
        Duration::from_millis(200),
    );
    let root = r[0].as_ref().unwrap_err();
    assert!(root.contains("rank 1 of 2 never arrived"), "{root}");
}

#[test]
fn duplicate_rank_is_refused_on_every_side() {
    let port = free_port();
    let envs = vec![rank(0, 3, port), rank(1, 3, port), rank(1, 3, port)];
    let start = Instant::now();
    let r = run_ranks(envs, b"id", Duration::from_secs(5));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "fails without waiting for the timeout"
    );
    for x in &r {
        let e = x.as_ref().unwrap_err();
        assert!(e.contains("rank 1 joined twice"), "{e}");
    }
    // Two processes both started as rank 0: the second finds the port taken.
    let port = free_port();
    let r = run_ranks(
        vec![rank(0, 2, port), rank(0, 2, port)],
        b"id",
        Duration::from_millis(500),
    );
    let errs: Vec<&String> = r.iter().map(|x| x.as_ref().unwrap_err()).collect();
    assert!(errs.iter().any(|e| e.contains("is in use")), "{errs:?}");
    assert!(
        errs.iter().any(|e| e.contains("rank 1 of 2 never arrived")),
        "{errs:?}"
    );
}

#[test]
fn mismatched_world_size_is_refused_on_both_sides() {
    let port = free_port();
    let r = run_ranks(
        vec![rank(0, 3, port), rank(1, 4, port)],
        b"id",
        Duration::from_secs(5),
    );
    for x in &r {
        let e = x.as_ref().unwrap_err();
        assert!(
            e.contains("rank 1 at") && e.contains("WORLD_SIZE 4 but rank 0 has 3"),
            "{e}"
        );
    }
}

#[test]
fn port_in_use_is_named() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let e = share_bytes(&rank(0, 2, port), Some(b"id"), Duration::from_secs(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "MASTER_PORT {port} on 127.0.0.1 is in use: pick another with --master-port or \
             MASTER_PORT"
        )
    );
}

#[test]
fn unresolvable_address_is_named() {
    for r in [0, 1] {
        let mut e = rank(r, 2, free_port());
        e.master_addr = "no-such-host.invalid".into();
        let start = Instant::now();
        let err = share_bytes(&e, (r == 0).then_some(&b"id"[..]), Duration::from_secs(2))
            .unwrap_err()
            .to_string();
        assert!(err.contains("MASTER_ADDR 'no-such-host.invalid'"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3));
    }
}

#[test]
fn unreachable_rank_0_times_out_with_advice() {
    let start = Instant::now();
    let e = share_bytes(&rank(2, 4, free_port()), None, Duration::from_millis(400))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank 2 could not reach rank 0 at 127.0.0.1:")
            && e.contains("same MASTER_ADDR and MASTER_PORT"),
        "{e}"
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn another_protocol_on_the_port_is_named() {
    // A rank that reaches some other server.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let t = thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        let mut buf = [0u8; 20];
        s.read_exact(&mut buf).unwrap();
        s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
    });
    let e = share_bytes(&rank(1, 2, port), None, Duration::from_secs(2))
        .unwrap_err()
        .to_string();
    t.join().unwrap();
    assert!(e.contains("not in octet's rendezvous protocol"), "{e}");

    // Rank 0 greeted by some other client.
    let port = free_port();
    let root = thread::spawn(move || {
        share_bytes(&rank(0, 2, port), Some(b"id"), Duration::from_secs(3)).unwrap_err()
    });
    let start = Instant::now();
    let mut s = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    };
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let e = root.join().unwrap().to_string();
    assert!(
        e.contains("does not speak octet's rendezvous protocol"),
        "{e}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn silent_connection_does_not_block_the_job() {
    // A port probe that connects and says nothing is dropped; the real rank still joins.
    let port = free_port();
    let root =
        thread::spawn(move || share_bytes(&rank(0, 2, port), Some(b"id"), Duration::from_secs(5)));
    let probe = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    };
    drop(probe);
    let got = share_bytes(&rank(1, 2, port), None, Duration::from_secs(5)).unwrap();
    assert_eq!(got, b"id");
    assert_eq!(root.join().unwrap().unwrap(), b"id");
}

/// This machine's address on the network (the source address of a route outwards; a UDP
/// `connect` sends nothing), if it has one.
fn network_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

#[test]
fn rank_0_listens_on_loopback_only_for_a_loopback_master_addr() {
    use octet_trainer::dist::listen_addrs;
    use std::net::SocketAddr;
    let at = |s: &str| -> Vec<SocketAddr> { vec![s.parse().unwrap()] };
    assert_eq!(
        listen_addrs("127.0.0.1", &at("127.0.0.1:5")),
        at("127.0.0.1:5")
    );
    assert_eq!(
        listen_addrs("localhost", &at("127.0.0.1:5")),
        at("127.0.0.1:5")
    );
    assert_eq!(listen_addrs("[::1]", &at("[::1]:5")), at("[::1]:5"));
    // A host name resolving to loopback on its own machine (Debian's 127.0.1.1 line) is
    // reached by the others at its network address: listen everywhere.
    assert_eq!(listen_addrs("gpu01", &at("127.0.1.1:5")), at("0.0.0.0:5"));
    assert_eq!(listen_addrs("10.0.0.7", &at("10.0.0.7:5")), at("0.0.0.0:5"));
    assert_eq!(listen_addrs("fe80::1", &at("[fe80::1]:5")), at("[::]:5"));
}

/// Rank 0 named by its network address is reached through any of its addresses, as ranks on
/// other machines reach it; one named by an address it does not have is refused.
#[test]
fn rank_0_at_a_network_address_accepts_every_interface() {
    let Some(ip) = network_address() else {
        panic!("this machine has no network address to test the rendezvous on");
    };
    let port = free_port();
    let mut root = rank(0, 3, port);
    root.master_addr = ip.to_string();
    let mut envs = vec![root, rank(1, 3, port)];
    let mut by_ip = rank(2, 3, port);
    by_ip.master_addr = ip.to_string();
    envs.push(by_ip);
    for r in run_ranks(envs, b"id", Duration::from_secs(5)) {
        assert_eq!(r.unwrap(), b"id");
    }
    let mut stranger = rank(0, 2, free_port());
    stranger.master_addr = "192.0.2.250".into();
    if ip.to_string() != stranger.master_addr {
        let e = share_bytes(&stranger, Some(b"id"), Duration::from_secs(1)).unwrap_err();
        assert!(
            e.to_string().contains("not an address of this machine"),
            "{e}"
        );
    }
}
