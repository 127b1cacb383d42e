//! The client port under attack, on loopback: silent connections are closed and never lock a
//! client out, and calls past a client's bound are refused before their body is read, while a
//! client of another address is served throughout.

mod common;

use common::*;
use locks_grpc::client::LockSpec;
use locks_grpc::{PortLimits, pb};
use locks_testing::wait::within;
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tonic::Code;

/// A session from `local` (another loopback address than the attacker's).
async fn session_from(server: &locks_grpc::GrpcServer, local: IpAddr) -> pb::Locked {
    let uri = format!("http://{}", server.local_addr());
    let channel = tonic::transport::Endpoint::from_shared(uri)
        .unwrap()
        .local_address(Some(local))
        .connect()
        .await
        .unwrap();
    let mut client = pb::locks_client::LocksClient::new(channel);
    let (mut tx, rx) = futures::channel::mpsc::channel(4);
    let mut events = client.session(rx).await.unwrap().into_inner();
    use futures::SinkExt;
    tx.send(lock_request(1, "good/client", None)).await.unwrap();
    loop {
        let event = events
            .message()
            .await
            .unwrap()
            .expect("the session goes on");
        if let Some(pb::session_event::Kind::Locked(locked)) = event.kind {
            return locked;
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn silent_connections_are_closed_and_never_lock_a_client_out() {
    let port = PortLimits {
        max_unproven: 8,
        unproven_deadline: Duration::from_secs(1),
        ..PortLimits::default()
    };
    let (_node, server) = node_and_server("port1", |c| c.port = port).await;
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(
            tokio::net::TcpStream::connect(server.local_addr())
                .await
                .unwrap(),
        );
    }
    // A client of another address gets in while they are open.
    let good: IpAddr = "127.0.0.2".parse().unwrap();
    let locked = within(BOUND, "the good client's lock", session_from(&server, good)).await;
    assert!(locked.grant.is_some());
    // Every silent connection is closed by the node: evicted, or past its deadline.
    within(BOUND, "every silent connection closed", async {
        for tcp in &mut silent {
            let mut byte = [0u8; 64];
            loop {
                match tcp.read(&mut byte).await {
                    Ok(0) | Err(_) => break,
                    // The server's HTTP/2 preface (SETTINGS), then its GOAWAY.
                    Ok(_) => continue,
                }
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn calls_past_an_address_bound_are_refused_and_another_address_is_served() {
    let port = PortLimits {
        max_calls_per_client: 16,
        ..PortLimits::default()
    };
    let (_node, server) = node_and_server("port2", |c| c.port = port).await;
    let uri = format!("http://{}", server.local_addr());
    let mut open = Vec::new();
    let mut refused = Vec::new();
    // Three connections of one address, six calls each that send no request (until their
    // senders are dropped: the client closes its side).
    for _ in 0..3 {
        let channel = tonic::transport::Endpoint::from_shared(uri.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        for _ in 0..6 {
            let mut client = pb::locks_client::LocksClient::new(channel.clone());
            let (tx, rx) = futures::channel::mpsc::channel::<pb::SessionRequest>(1);
            match client.session(rx).await {
                Ok(events) => open.push((tx, events.into_inner())),
                Err(status) => refused.push(status),
            }
        }
    }
    assert_eq!(open.len(), 16, "{refused:?}");
    assert_eq!(refused.len(), 2);
    for status in &refused {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("max_calls_per_client"),
            "{status:?}"
        );
    }
    let good: IpAddr = "127.0.0.2".parse().unwrap();
    let locked = within(BOUND, "the good client's lock", session_from(&server, good)).await;
    assert!(locked.grant.is_some());
    // The address's calls are counted back as they end.
    open.clear();
    let mut s = within(BOUND, "a session again", async {
        loop {
            if let Ok(s) = session(&server, None).await {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    s.lock(LockSpec::new("again", "X")).await.unwrap();
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_node_full_of_one_addresss_sessions_lets_another_address_in() {
    let (_node, server) = node_and_server("port3", |c| {
        c.limits.max_sessions = 4;
        c.limits.max_sessions_per_client = 4;
    })
    .await;
    let mut flood = Vec::new();
    for _ in 0..4 {
        flood.push(raw_session(&server).await);
    }
    let good: IpAddr = "127.0.0.2".parse().unwrap();
    let locked = within(BOUND, "the newcomer's lock", session_from(&server, good)).await;
    assert!(locked.grant.is_some());
    // The flooding address's newest session was ended, saying why.
    let (_tx, events) = flood.last_mut().unwrap();
    let ended = within(BOUND, "the evicted session's end", async {
        loop {
            match events.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the evicted session ended without a status"),
                Err(status) => return status,
            }
        }
    })
    .await;
    assert_eq!(ended.code(), Code::ResourceExhausted, "{ended:?}");
    assert!(
        ended.message().contains("address holds the most"),
        "{ended:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_sessions_of_one_address_share_a_bound_on_the_locks_they_request() {
    let (_node, server) = node_and_server("port4", |c| c.limits.max_locks_per_client = 3).await;
    let mut one = session(&server, None).await.unwrap();
    let mut two = session(&server, None).await.unwrap();
    one.lock(LockSpec::new("a", "X")).await.unwrap();
    one.lock(LockSpec::new("b", "X")).await.unwrap();
    two.lock(LockSpec::new("c", "X")).await.unwrap();
    match two.lock(LockSpec::new("d", "X")).await {
        Err(locks_grpc::client::ClientError::Refused { code, message }) => {
            assert_eq!(code, Code::ResourceExhausted);
            assert!(message.contains("max_locks_per_client"), "{message}");
        }
        other => panic!("a fourth lock of the address: {other:?}"),
    }
    one.unlock("a").await.unwrap();
    two.lock(LockSpec::new("d", "X")).await.unwrap();
    // A session's locks count for nothing once it ends.
    one.end().await.unwrap();
    two.lock(LockSpec::new("e", "X")).await.unwrap();
    two.lock(LockSpec::new("f", "X")).await.unwrap_err();
    two.end().await.unwrap();
}
