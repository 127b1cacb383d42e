//! The gRPC API end to end, in process: a node, its server on loopback and the Rust client.
//! Grants with tokens, bad input, the bearer token, limits, wait bounds, a session that
//! vanishes, and a deadlock between a gRPC session and an in-process transaction.

use locks_agent::{Options, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_grpc::client::{Client, ClientError, ClientOptions, LockSpec};
use locks_grpc::pb::session_event::Kind;
use locks_grpc::{Limits, pb};
mod common;

use common::*;
use locks_testing::wait::within;
use std::time::Duration;
use tonic::Code;

#[tokio::test(flavor = "current_thread")]
async fn a_lock_is_granted_with_tokens_and_the_next_holder_gets_larger_ones() {
    let (_node, server) = node_and_server("g1", |_| {}).await;
    let mut first = session(&server, None).await.unwrap();
    assert_eq!(first.started().node, "g1");
    let a = within(BOUND, "lock", first.lock(LockSpec::new("db/x", "X")))
        .await
        .unwrap();
    let grant = a.grant.clone().unwrap();
    assert_eq!(grant.id, vec!["db", "x"]);
    assert_eq!(grant.mode, "X");
    assert_eq!(grant.tokens[0].node, "g1");
    let status = first.status().await.unwrap();
    assert_eq!(status.status, pb::TransactionStatus::HaveAllLocks as i32);
    first.unlock("db/x").await.unwrap();
    let mut second = session(&server, None).await.unwrap();
    let b = within(BOUND, "lock", second.lock(LockSpec::new("db/x", "write")))
        .await
        .unwrap();
    assert!(version(&b) > version(&a), "{b:?} after {a:?}");
    second.end().await.unwrap();
    first.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn bad_requests_get_errors_that_say_what_was_wrong_and_the_session_goes_on() {
    let (_node, server) = node_and_server("g2", |_| {}).await;
    let mut s = session(&server, None).await.unwrap();
    let refused = |r: Result<pb::Locked, ClientError>| match r {
        Err(ClientError::Refused { code, message }) => (code, message),
        other => panic!("not refused: {other:?}"),
    };
    let (code, message) = refused(s.lock(LockSpec::new("db/x", "Z")).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("unknown mode"), "{message}");
    let (code, message) = refused(s.lock(LockSpec::new("db//x", "X")).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("malformed lock id"), "{message}");
    let (code, message) = refused(s.lock(LockSpec::new("db/x", "X").nodes(["nowhere"])).await);
    assert_eq!(code, Code::NotFound);
    assert!(message.contains("unknown node"), "{message}");
    // Still serving.
    s.lock(LockSpec::new("db/x", "S")).await.unwrap();
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_node_with_a_token_refuses_calls_without_it() {
    let (_node, server) = node_and_server("g3", |c| c.token = Some("s3cret".to_owned())).await;
    match session(&server, None).await {
        Err(ClientError::Status(s)) => assert_eq!(s.code(), Code::Unauthenticated),
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("a session without the token"),
    }
    match session(&server, Some("wrong")).await {
        Err(ClientError::Status(s)) => assert_eq!(s.code(), Code::Unauthenticated),
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("a session with a wrong token"),
    }
    let mut s = session(&server, Some("s3cret")).await.unwrap();
    s.lock(LockSpec::new("a", "X")).await.unwrap();
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn sessions_per_client_are_bounded_and_freed_when_one_ends() {
    let limits = Limits {
        max_sessions_per_client: 1,
        ..Limits::default()
    };
    let (_node, server) = node_and_server("g4", |c| c.limits = limits).await;
    let one = session(&server, None).await.unwrap();
    match session(&server, None).await {
        Err(ClientError::Status(s)) => assert_eq!(s.code(), Code::ResourceExhausted),
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("a second session"),
    }
    one.end().await.unwrap();
    within(BOUND, "a session again", async {
        loop {
            if let Ok(s) = session(&server, None).await {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .end()
    .await
    .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn waiting_calls_are_bounded_and_a_wait_bound_withdraws_the_request() {
    use futures::SinkExt;
    let limits = Limits {
        max_pending: 1,
        ..Limits::default()
    };
    let (node, server) = node_and_server("g5", |c| c.limits = limits).await;
    let holder = begin_transaction(&node, Options::default()).await.unwrap();
    holder.lock(lock_id!["busy"], Mode::X).await.unwrap();
    let (mut tx, mut events) = raw_session(&server).await;
    tx.send(lock_request(1, "busy", Some(300))).await.unwrap();
    tx.send(lock_request(2, "busy/row", None)).await.unwrap();
    let second = answer(&mut events).await;
    assert_eq!(second.request_id, 2);
    match second.kind {
        Some(Kind::Error(e)) => assert_eq!(e.code, Code::ResourceExhausted as i32, "{e:?}"),
        other => panic!("not refused: {other:?}"),
    }
    let first = answer(&mut events).await;
    assert_eq!(first.request_id, 1);
    match first.kind {
        Some(Kind::Error(e)) => {
            assert_eq!(e.code, Code::DeadlineExceeded as i32, "{e:?}");
            assert!(e.message.contains("withdrawn"), "{}", e.message);
        }
        other => panic!("not timed out: {other:?}"),
    }
    // Withdrawn: the holder's release leaves the lock free for another transaction.
    holder.end().await.unwrap();
    let next = begin_transaction(&node, Options::default()).await.unwrap();
    within(
        BOUND,
        "the lock is free",
        next.lock(lock_id!["busy"], Mode::X),
    )
    .await
    .unwrap();
    assert!(next.status().await.unwrap().have_all_locks());
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_that_vanishes_releases_its_locks() {
    let (node, server) = node_and_server("g6", |_| {}).await;
    let mut s = session(&server, None).await.unwrap();
    s.lock(LockSpec::new("job", "X")).await.unwrap();
    let waiter = begin_transaction(&node, Options::default()).await.unwrap();
    let wait = waiter.lock(lock_id!["job"], Mode::X);
    drop(s);
    within(BOUND, "the lock passes on", wait).await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_deadlock_between_a_session_and_an_in_process_transaction_is_resolved() {
    let (node, server) = node_and_server("g7", |_| {}).await;
    let mut s = session(&server, None).await.unwrap();
    let local = begin_transaction(&node, Options::default()).await.unwrap();
    s.lock(LockSpec::new("a", "X")).await.unwrap();
    local.lock(lock_id!["b"], Mode::X).await.unwrap();
    let local_id = local.id().to_string();
    let local_wait = local.lock(lock_id!["a"], Mode::X);
    // The local transaction ends as soon as it has both locks, so whichever side surrenders,
    // the other can finish.
    let local_task = tokio::spawn(async move {
        let got = local_wait.await;
        local.end().await.unwrap();
        got
    });
    within(BOUND, "the session's lock", s.lock(LockSpec::new("b", "X")))
        .await
        .unwrap();
    // The session heard of the deadlock; if it was the victim, of its loss first.
    let mut seen = Vec::new();
    let d = pushed(&mut s, |k| match k {
        Kind::Deadlock(d) => Some(d),
        other => {
            seen.push(other);
            None
        }
    })
    .await;
    assert!(
        d.surrendered_by_this_session != (d.victim == local_id),
        "{d:?}, local agent {local_id}"
    );
    let surrendered = seen
        .iter()
        .any(|k| matches!(k, Kind::Lost(l) if l.cause == pb::LossCause::Surrendered as i32));
    assert_eq!(surrendered, d.surrendered_by_this_session, "{seen:?}");
    s.end().await.unwrap();
    within(BOUND, "the local transaction", local_task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn over_tls_with_client_certificates_only_a_client_of_the_ca_gets_in() {
    use locks_grpc::ServerTls;
    use locks_grpc::client::ClientTls;
    use locks_testing::certs::{SERVER_NAME, TestCa};
    let ca = TestCa::new("client-api-ca");
    let server_cert = ca.node("g8");
    let (_node, server) = node_and_server("g8", |c| {
        c.tls = Some(ServerTls {
            cert: server_cert.cert.clone().into_bytes(),
            key: server_cert.key.clone().into_bytes(),
            client_ca: Some(ca.cert.clone().into_bytes()),
        });
    })
    .await;
    let addr = server.local_addr().to_string();
    let tls = |identity: Option<(Vec<u8>, Vec<u8>)>| ClientOptions {
        tls: Some(ClientTls {
            ca: ca.cert.clone().into_bytes(),
            server_name: SERVER_NAME.to_owned(),
            identity,
        }),
        ..ClientOptions::default()
    };
    let me = ca.node("client");
    let mut client = Client::connect(
        &addr,
        tls(Some((me.cert.into_bytes(), me.key.into_bytes()))),
    )
    .await
    .unwrap();
    let mut s = client.session().await.unwrap();
    s.lock(LockSpec::new("tls/x", "X")).await.unwrap();
    s.end().await.unwrap();
    // Without a client certificate, or in plain text, no session.
    let refused = async |options: ClientOptions| match Client::connect(&addr, options).await {
        Ok(mut client) => client.session().await.is_err(),
        Err(_) => true,
    };
    assert!(within(BOUND, "no certificate", refused(tls(None))).await);
    assert!(within(BOUND, "plain text", refused(ClientOptions::default())).await);
}

#[tokio::test(flavor = "current_thread")]
async fn a_local_lock_granted_at_once_is_answered_alone_and_a_nowait_grant_is_pushed() {
    let (node, server) = node_and_server("g9", |_| {}).await;
    let mut s = session(&server, None).await.unwrap();
    // Granted at once on the node's fast path: the answer carries the grant, and nothing is
    // pushed for it (no agent runs for the session yet).
    let x = s.lock(LockSpec::new("x", "X")).await.unwrap();
    s.unlock("x").await.unwrap();
    // A queued request granted at once is answered `Accepted`, its grant pushed: the first
    // pushed event of the session.
    s.lock_nowait(LockSpec::new("y", "S")).await.unwrap();
    let first = within(BOUND, "a pushed event", s.next_event())
        .await
        .unwrap()
        .unwrap();
    match first.kind.unwrap() {
        Kind::Granted(g) => {
            assert_eq!(g.id, vec!["y"]);
            assert_eq!(g.mode, "S");
            assert_eq!(g.tokens[0].node, "g9");
        }
        other => panic!("first pushed event: {other:?}"),
    }
    // A request that waits starts the agent: its grant, the status changes and a loss are
    // pushed from then on.
    let holder = begin_transaction(&node, Options::default()).await.unwrap();
    holder.lock(lock_id!["z"], Mode::X).await.unwrap();
    s.lock_nowait(LockSpec::new("z", "X")).await.unwrap();
    pushed(&mut s, |k| {
        matches!(k, Kind::Status(st) if st.status == pb::TransactionStatus::Waiting as i32)
            .then_some(())
    })
    .await;
    holder.end().await.unwrap();
    let z = pushed(&mut s, |k| match k {
        Kind::Granted(g) => Some(g),
        _ => None,
    })
    .await;
    assert_eq!(z.id, vec!["z"]);
    assert!(version(&x) > 0);
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_converts_a_lock_down_and_the_tables_and_graph_show_the_queues() {
    let (node, server) = node_and_server("g10", |_| {}).await;
    let mut client = Client::connect(&server.local_addr().to_string(), ClientOptions::default())
        .await
        .unwrap();
    let mut writer = client.session().await.unwrap();
    let mut reader = client.session().await.unwrap();
    writer.lock(LockSpec::new("db/x", "X")).await.unwrap();
    reader
        .lock_nowait(LockSpec::new("db/x", "S"))
        .await
        .unwrap();
    // The table shows the holder and the waiter; the graph the wait.
    let table = client.table(pb::TableRequest::default()).await.unwrap();
    assert_eq!(table.nodes.len(), 1);
    assert!(table.missing.is_empty());
    let x = table.nodes[0]
        .locks
        .iter()
        .find(|l| l.id == ["db", "x"])
        .expect("db/x in the table");
    assert_eq!(x.group, "X");
    assert_eq!(x.granted[0].agent, writer.started().agent);
    assert_eq!(x.waiting[0].agent, reader.started().agent);
    assert_eq!(x.waiting[0].mode, "S");
    let graph = client.graph(pb::GraphRequest::default()).await.unwrap();
    let edge = &graph.edges[0];
    assert_eq!(
        (
            edge.waiter.as_str(),
            edge.blocker.as_str(),
            edge.node.as_str()
        ),
        (
            reader.started().agent.as_str(),
            writer.started().agent.as_str(),
            "g10"
        )
    );
    assert!(!edge.in_cycle);
    assert!(graph.dot.starts_with("digraph"), "{}", graph.dot);
    // X down to S: the reader is served, both hold the lock.
    writer.convert("db/x", "S").await.unwrap();
    let granted = pushed(&mut reader, |k| match k {
        Kind::Granted(g) => Some(g),
        _ => None,
    })
    .await;
    assert_eq!(granted.id, vec!["db", "x"]);
    let table = client.table(pb::TableRequest::default()).await.unwrap();
    let x = table.nodes[0]
        .locks
        .iter()
        .find(|l| l.id == ["db", "x"])
        .unwrap();
    assert_eq!((x.group.as_str(), x.granted.len()), ("S", 2));
    // Up is not a conversion; an unknown mode is refused.
    match writer.convert("db/x", "X").await {
        Err(ClientError::Refused { code, .. }) => assert_eq!(code, Code::InvalidArgument),
        other => panic!("converted up: {other:?}"),
    }
    match writer.convert("db/x", "Q").await {
        Err(ClientError::Refused { code, message }) => {
            assert_eq!(code, Code::InvalidArgument);
            assert!(message.contains("unknown mode"), "{message}");
        }
        other => panic!("converted to Q: {other:?}"),
    }
    writer.end().await.unwrap();
    reader.end().await.unwrap();
    drop(node);
}

#[tokio::test(flavor = "current_thread")]
async fn a_sent_unlock_is_carried_out_before_the_next_call_and_only_its_refusal_is_reported() {
    let (_node, server) = node_and_server("g11", |_| {}).await;
    let mut s = session(&server, None).await.unwrap();
    let mut client = Client::connect(&server.local_addr().to_string(), ClientOptions::default())
        .await
        .unwrap();
    let held = |table: &pb::TableReply| -> Vec<Vec<String>> {
        let node = &table.nodes[0];
        let held = node.locks.iter().filter(|q| !q.granted.is_empty());
        held.map(|q| q.id.clone()).collect()
    };
    s.lock(LockSpec::new("db/x", "X")).await.unwrap();
    s.lock(LockSpec::new("db/y", "X")).await.unwrap();
    s.send_unlock("db/x").await.unwrap();
    // A malformed path: refused, and the refusal comes as an event; the valid unlock's
    // `Accepted` does not.
    s.send_unlock("db//z").await.unwrap();
    s.send_unlock("db/y").await.unwrap();
    // The node answers the status after it carried out the three unlocks: nothing is held.
    let status = s.status().await.unwrap();
    assert_eq!(status.status, pb::TransactionStatus::NoLocks as i32);
    let table = client.table(pb::TableRequest::default()).await.unwrap();
    assert_eq!(held(&table), Vec::<Vec<String>>::new(), "{table:?}");
    // The events hold the refusals, in order, and no `Accepted`: a second malformed unlock,
    // answered before the ping, is the last of them.
    s.send_unlock("//").await.unwrap();
    s.ping().await.unwrap();
    let mut refusals = Vec::new();
    while refusals.len() < 2 {
        let event = within(BOUND, "a refusal", s.next_event())
            .await
            .unwrap()
            .unwrap();
        match event.kind.unwrap() {
            Kind::Error(e) => refusals.push((event.request_id, tonic::Code::from_i32(e.code))),
            Kind::Accepted(a) => panic!("an unlock's Accepted was reported: {a:?}"),
            _ => {}
        }
    }
    // Requests 1 and 2 were the locks, 3 the valid unlock, 4 the malformed one, 5 the third
    // unlock, 6 the status, 7 the second malformed unlock.
    assert_eq!(
        refusals,
        vec![(4, Code::InvalidArgument), (7, Code::InvalidArgument)]
    );
    // The session goes on: the lock is free for it again.
    s.lock(LockSpec::new("db/x", "X")).await.unwrap();
    s.end().await.unwrap();
}
