//! The engine's promises kept on the wire: a `lock` call the client gives up on is withdrawn
//! (`Cancel`), a holder reads its current tokens (`Tokens`), `Started` tells the keepalive
//! bound a client-side lease counts, a request over the size limit is refused alone while the
//! session goes on, a stream that fails ends with a status that says why, and a session learns
//! which locks it surrendered (or aborts, when it asked to).

mod common;

use common::*;
use futures::SinkExt;
use locks_agent::{Options, begin_transaction};
use locks_core::{Mode, lock_id};
use locks_grpc::client::{Client, ClientError, ClientOptions, LockSpec, SessionOptions};
use locks_grpc::pb::session_event::Kind;
use locks_grpc::{Limits, pb};
use locks_testing::wait::within;
use std::time::Duration;
use tonic::Code;

fn request(request_id: u64, kind: pb::session_request::Kind) -> pb::SessionRequest {
    pb::SessionRequest {
        request_id,
        kind: Some(kind),
    }
}

fn status_request(request_id: u64) -> pb::SessionRequest {
    request(
        request_id,
        pb::session_request::Kind::Status(pb::StatusRequest {}),
    )
}

fn cancel(request_id: u64, target: u64) -> pb::SessionRequest {
    request(
        request_id,
        pb::session_request::Kind::Cancel(pb::Cancel { request_id: target }),
    )
}

fn error_code(event: &pb::SessionEvent) -> Option<Code> {
    match &event.kind {
        Some(Kind::Error(e)) => Some(Code::from_i32(e.code)),
        _ => None,
    }
}

fn status_of(event: &pb::SessionEvent) -> pb::TransactionStatus {
    match &event.kind {
        Some(Kind::Status(s)) => s.status(),
        other => panic!("not a status: {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_lock_call_is_withdrawn_and_the_next_waiter_is_granted_at_once() {
    let (node, server) = node_and_server("p1", |_| {}).await;
    let holder = begin_transaction(&node, Options::default()).await.unwrap();
    holder.lock(lock_id!["busy"], Mode::X).await.unwrap();
    let (mut tx, mut events) = raw_session(&server).await;
    tx.send(lock_request(1, "busy", None)).await.unwrap();
    // Answered after the lock request reached the agent: it waits in the queue.
    tx.send(status_request(2)).await.unwrap();
    let status = answer(&mut events).await;
    assert_eq!(status.request_id, 2);
    assert_eq!(status_of(&status), pb::TransactionStatus::Waiting);
    tx.send(cancel(3, 1)).await.unwrap();
    let withdrawn = answer(&mut events).await;
    assert_eq!(withdrawn.request_id, 1, "{withdrawn:?}");
    assert_eq!(
        error_code(&withdrawn),
        Some(Code::Cancelled),
        "{withdrawn:?}"
    );
    let accepted = answer(&mut events).await;
    assert_eq!(accepted.request_id, 3);
    assert!(
        matches!(accepted.kind, Some(Kind::Accepted(_))),
        "{accepted:?}"
    );
    // Nothing of the withdrawn request is left: the next waiter gets the lock as soon as the
    // holder lets it go, and the session holds nothing.
    let next = begin_transaction(&node, Options::default()).await.unwrap();
    let wait = next.lock(lock_id!["busy"], Mode::X);
    holder.end().await.unwrap();
    within(BOUND, "the next waiter's grant", wait)
        .await
        .unwrap();
    tx.send(status_request(4)).await.unwrap();
    let after = answer(&mut events).await;
    assert_eq!(
        status_of(&after),
        pb::TransactionStatus::NoLocks,
        "{after:?}"
    );
    next.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancel_of_a_call_already_answered_is_accepted_and_the_lock_stays_held() {
    let (_node, server) = node_and_server("p2", |_| {}).await;
    let (mut tx, mut events) = raw_session(&server).await;
    tx.send(lock_request(1, "free", None)).await.unwrap();
    let locked = answer(&mut events).await;
    assert!(matches!(locked.kind, Some(Kind::Locked(_))), "{locked:?}");
    tx.send(cancel(2, 1)).await.unwrap();
    let accepted = answer(&mut events).await;
    assert_eq!(accepted.request_id, 2);
    assert!(
        matches!(accepted.kind, Some(Kind::Accepted(_))),
        "{accepted:?}"
    );
    tx.send(status_request(3)).await.unwrap();
    let status = answer(&mut events).await;
    assert_eq!(status_of(&status), pb::TransactionStatus::HaveAllLocks);
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_lock_future_of_the_rust_client_withdraws_its_request() {
    let (node, server) = node_and_server("p3", |_| {}).await;
    let holder = begin_transaction(&node, Options::default()).await.unwrap();
    holder.lock(lock_id!["busy"], Mode::X).await.unwrap();
    let mut s = session(&server, None).await.unwrap();
    s.lock_nowait(LockSpec::new("other", "X")).await.unwrap();
    // The lock call waits behind the holder; dropping its future withdraws it.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        s.lock(LockSpec::new("busy", "X")),
    )
    .await;
    assert!(
        gave_up.is_err(),
        "granted while held elsewhere: {gave_up:?}"
    );
    // The `Cancel` goes out on the client's stream; the holder ends in this process. Ended
    // before the node withdrew the request, the holder would let the session be granted
    // first (a grant that comes first is kept), so the test waits for the withdrawal.
    within(BOUND, "the session's request withdrawn", async {
        while s.status().await.unwrap().status() == pb::TransactionStatus::Waiting {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let next = begin_transaction(&node, Options::default()).await.unwrap();
    let wait = next.lock(lock_id!["busy"], Mode::X);
    holder.end().await.unwrap();
    within(BOUND, "the next waiter's grant", wait)
        .await
        .unwrap();
    match s.tokens("busy").await {
        Err(ClientError::Refused { code, .. }) => assert_eq!(code, Code::FailedPrecondition),
        other => panic!("the withdrawn lock is held: {other:?}"),
    }
    next.end().await.unwrap();
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn tokens_read_a_held_locks_current_tokens_and_started_tells_the_keepalive_bound() {
    let (_node, server) = node_and_server("p4", |c| c.keepalive = Duration::from_secs(3)).await;
    let mut s = session(&server, None).await.unwrap();
    assert_eq!(s.started().keepalive_ms, 3000);
    assert!(!s.started().abort_on_deadlock);
    let locked = s.lock(LockSpec::new("db/x", "X")).await.unwrap();
    let now = s.tokens("db/x").await.unwrap();
    assert_eq!(Some(&now), locked.grant.as_ref());
    match s.tokens("db/y").await {
        Err(ClientError::Refused { code, message }) => {
            assert_eq!(code, Code::FailedPrecondition);
            assert!(message.contains("not requested"), "{message}");
        }
        other => panic!("tokens of a lock not held: {other:?}"),
    }
    s.ping().await.unwrap();
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_over_the_size_limit_is_refused_alone_and_the_session_goes_on() {
    let (_node, server) = node_and_server("p5", |_| {}).await;
    let mut s = session(&server, None).await.unwrap();
    let huge = "k".repeat(1 << 20);
    match s.lock(LockSpec::new(&huge, "X")).await {
        Err(ClientError::Refused { code, message }) => {
            assert_eq!(code, Code::ResourceExhausted);
            assert!(message.contains("max_message_bytes"), "{message}");
        }
        other => panic!("a 1 MiB lock id was not refused: {other:?}"),
    }
    s.lock(LockSpec::new("db/x", "X")).await.unwrap();
    s.end().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_message_over_the_frame_limit_ends_the_stream_with_a_status_that_says_why() {
    let limits = Limits {
        max_frame_bytes: 256 * 1024,
        ..Limits::default()
    };
    let (_node, server) = node_and_server("p6", |c| c.limits = limits).await;
    let mut s = session(&server, None).await.unwrap();
    let huge = "k".repeat(1 << 20);
    match s.lock(LockSpec::new(&huge, "X")).await {
        Err(ClientError::Status(status)) => {
            assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
            assert!(
                status.message().contains("max_frame_bytes"),
                "{}",
                status.message()
            );
        }
        other => panic!("the stream did not end with a status: {other:?}"),
    }
}

/// A `SessionRequest` whose lock id keys are raw bytes, to send one that is not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawRequest {
    #[prost(uint64, tag = "1")]
    request_id: u64,
    #[prost(message, optional, tag = "2")]
    lock: Option<RawLock>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawLock {
    #[prost(bytes = "vec", repeated, tag = "1")]
    id: Vec<Vec<u8>>,
    #[prost(string, tag = "2")]
    mode: String,
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_that_does_not_decode_ends_the_stream_with_invalid_argument() {
    let (_node, server) = node_and_server("p7", |_| {}).await;
    let uri = format!("http://{}", server.local_addr());
    let channel = tonic::transport::Endpoint::from_shared(uri)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let bad = RawRequest {
        request_id: 1,
        lock: Some(RawLock {
            id: vec![vec![0xff, 0xfe]],
            mode: "X".into(),
        }),
    };
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/locks.v1.Locks/Session");
    let codec = tonic_prost::ProstCodec::<RawRequest, pb::SessionEvent>::default();
    let mut events = grpc
        .streaming(
            tonic::Request::new(futures::stream::iter([bad])),
            path,
            codec,
        )
        .await
        .unwrap()
        .into_inner();
    let failed = within(BOUND, "the stream's end", async {
        loop {
            match events.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended without a status"),
                Err(status) => return status,
            }
        }
    })
    .await;
    assert_eq!(failed.code(), Code::InvalidArgument, "{failed:?}");
    assert!(failed.message().contains("SessionRequest"), "{failed:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_deadlock_victim_is_told_what_it_surrendered_or_aborts_when_it_asked_to() {
    for abort in [false, true] {
        let name = if abort { "p8a" } else { "p8s" };
        let (_node, server) = node_and_server(name, |_| {}).await;
        let mut client =
            Client::connect(&server.local_addr().to_string(), ClientOptions::default())
                .await
                .unwrap();
        let mut older = client.session().await.unwrap();
        // Begun later on the node's thread: the larger agent id, so the deadlock's victim.
        let options = SessionOptions::default().abort_on_deadlock(abort);
        let mut younger = client.session_with(options).await.unwrap();
        assert_eq!(younger.started().abort_on_deadlock, abort);
        older.lock(LockSpec::new("a", "X")).await.unwrap();
        younger.lock(LockSpec::new("b", "X")).await.unwrap();
        let older_id = older.started().agent.clone();
        // The older session ends as soon as it has both locks, so that a victim asking for
        // its surrendered lock again can finish.
        let older_task = tokio::spawn(async move {
            let got = older.lock(LockSpec::new("b", "X")).await;
            older.end().await.unwrap();
            got
        });
        let got = within(
            BOUND,
            "the victim's call",
            younger.lock(LockSpec::new("a", "X")),
        )
        .await;
        if abort {
            match got {
                Err(ClientError::Refused { code, .. }) => assert_eq!(code, Code::Aborted),
                other => panic!("the victim did not abort: {other:?}"),
            }
        } else {
            let locked = got.unwrap();
            let surrendered: Vec<_> = locked.surrendered.iter().map(|l| l.id.join("/")).collect();
            assert_eq!(surrendered, ["b"], "{locked:?}");
        }
        let older_got = within(BOUND, "the winner's call", older_task)
            .await
            .unwrap();
        let locked = older_got.unwrap();
        assert!(locked.surrendered.is_empty(), "{older_id}: {locked:?}");
        // A victim that aborts releases everything: the winner's lock is a plain grant then.
        assert_eq!(locked.deadlocks.is_empty(), abort, "{older_id}: {locked:?}");
        younger.end().await.unwrap_or(());
    }
}
