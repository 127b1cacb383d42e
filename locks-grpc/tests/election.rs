//! Leader election through the API, in process: two campaigners of one group elect one leader,
//! an observer sees the same one, and when the leader's client resigns (drops its stream) the
//! other takes over with a larger term; a leader proclaims a new value, which every member's
//! stream carries, and nobody else may; a lone campaign over three nodes leads although no
//! member runs on the other two, an observer started later on one of them sees it, and a
//! proclamation there, which no majority of members can confirm, is refused at its timeout.

use locks_grpc::client::{Client, ClientError, ClientOptions};
use locks_grpc::{GrpcConfig, pb, serve};
use locks_server::{Node, NodeConfig};
use locks_testing::wait::within;
use std::time::Duration;
use tonic::Streaming;

const BOUND: Duration = Duration::from_secs(30);

/// The next event naming a leader.
async fn leader(stream: &mut Streaming<pb::LeaderEvent>) -> pb::LeaderEvent {
    within(BOUND, "a leader", async {
        loop {
            let event = stream.message().await.unwrap().expect("the stream goes on");
            if event.has_leader {
                return event;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "current_thread")]
async fn two_campaigners_elect_one_leader_and_the_other_takes_over_when_it_resigns() {
    let node = Node::start(NodeConfig::new("e1")).await.unwrap();
    let server = serve(&node, GrpcConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = server.local_addr().to_string();
    let mut client = Client::connect(&addr, ClientOptions::default())
        .await
        .unwrap();
    let mut first = client.campaign("jobs", &[]).await.unwrap();
    let won = leader(&mut first).await;
    assert!(won.is_this_campaign, "{won:?}");
    assert_eq!(won.leader_node, "e1");
    let mut second = client.campaign("jobs", &[]).await.unwrap();
    let seen = leader(&mut second).await;
    assert_eq!(seen.leader, won.leader);
    assert!(!seen.is_this_campaign);
    let mut observer = client.observe("jobs", &[]).await.unwrap();
    assert_eq!(leader(&mut observer).await.leader, won.leader);
    // The leader resigns: the second campaigner leads, with a larger term.
    drop(first);
    let next = within(BOUND, "the second leads", async {
        loop {
            let event = leader(&mut second).await;
            if event.is_this_campaign {
                return event;
            }
        }
    })
    .await;
    assert!(next.term > won.term, "{next:?} after {won:?}");
    let bad = client.campaign("", &[]).await.map(|_| ()).unwrap_err();
    assert!(bad.to_string().contains("group name"), "{bad}");
}

/// The next event that `pick` accepts.
async fn until(
    stream: &mut Streaming<pb::LeaderEvent>,
    what: &str,
    pick: impl Fn(&pb::LeaderEvent) -> bool,
) -> pb::LeaderEvent {
    within(BOUND, what, async {
        loop {
            let event = stream.message().await.unwrap().expect("the stream goes on");
            if pick(&event) {
                return event;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "current_thread")]
async fn a_leader_proclaims_a_new_value_without_a_new_election() {
    let node = Node::start(NodeConfig::new("e2")).await.unwrap();
    let server = serve(&node, GrpcConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = server.local_addr().to_string();
    let mut client = Client::connect(&addr, ClientOptions::default())
        .await
        .unwrap();
    let mut first = client
        .campaign_with_value("svc", &[], b"10.0.0.1:80".to_vec())
        .await
        .unwrap();
    let won = until(&mut first, "first leads", |e| e.is_this_campaign).await;
    assert_eq!(won.value, b"10.0.0.1:80");
    let mut second = client
        .campaign_with_value("svc", &[], b"10.0.0.2:80".to_vec())
        .await
        .unwrap();
    let mut observer = client.observe("svc", &[]).await.unwrap();
    let seen = until(&mut observer, "the leader's value", |e| {
        e.has_leader && !e.value.is_empty()
    })
    .await;
    assert_eq!(
        (seen.leader.as_str(), seen.value.as_slice()),
        (won.leader.as_str(), &b"10.0.0.1:80"[..])
    );
    // An observer sees the leader's id and term, not the campaign's secret: it cannot
    // proclaim in the leader's name.
    assert!(seen.campaign_secret.is_empty());
    let forged = client
        .proclaim("svc", &seen, b"EVIL redirect".to_vec())
        .await
        .unwrap_err();
    match &forged {
        ClientError::Status(s) => assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}"),
        other => panic!("a proclamation without the secret: {other}"),
    }
    let wrong = pb::LeaderEvent {
        campaign_secret: vec![0; 16],
        ..won.clone()
    };
    let forged = client.proclaim("svc", &wrong, b"x".to_vec()).await;
    assert!(forged.is_err(), "a wrong secret was taken");
    client
        .proclaim("svc", &won, b"10.0.0.1:81".to_vec())
        .await
        .unwrap();
    for stream in [&mut first, &mut second, &mut observer] {
        let next = until(stream, "the new value", |e| e.value == b"10.0.0.1:81").await;
        assert_eq!(
            (next.leader.as_str(), next.term),
            (won.leader.as_str(), won.term)
        );
    }
    // Only the leader, in its term, may proclaim.
    let later = pb::LeaderEvent {
        term: won.term + 1,
        ..won.clone()
    };
    let stale = client
        .proclaim("svc", &later, b"x".to_vec())
        .await
        .unwrap_err();
    assert!(stale.to_string().contains("does not lead"), "{stale}");
    let nobody = pb::LeaderEvent {
        leader: "e2/nobody".into(),
        ..won.clone()
    };
    let other = client
        .proclaim("svc", &nobody, b"x".to_vec())
        .await
        .unwrap_err();
    assert!(other.to_string().contains("does not lead"), "{other}");
    // The next leader announces its own value.
    drop(first);
    let next = until(&mut observer, "the second leads", |e| {
        e.has_leader && e.leader != won.leader
    })
    .await;
    assert_eq!(next.value, b"10.0.0.2:80");
    drop(second);
}

/// etcd's election: a campaign leads once it holds the election lock, whether or not others
/// campaign or observe. One campaign over `ea`, `eb`, `ec` (connected over loopback), run on
/// `ea`, with no member of the group on `eb` or `ec`, leads. A proclamation waits for members
/// on a majority of the nodes to have the value, and there are none: it is refused at its
/// call's timeout, the value taken all the same. An observer started afterwards through
/// `eb`'s API sees that leader and its value.
#[tokio::test(flavor = "current_thread")]
async fn a_lone_campaign_over_three_nodes_leads_with_no_member_on_the_others() {
    let loopback = "127.0.0.1:0".parse().unwrap();
    let names = ["ea", "eb", "ec"];
    let configs = names.map(|n| {
        NodeConfig::new(n)
            .listen(loopback)
            .cookie("secret")
            .start_delay(Duration::ZERO)
    });
    let nodes = locks_testing::cluster::connected(configs, BOUND).await;
    let group: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let on_a = serve(&nodes[0], GrpcConfig::new(loopback)).unwrap();
    let mut client = Client::connect(&on_a.local_addr().to_string(), ClientOptions::default())
        .await
        .unwrap();
    let mut campaign = client.campaign("jobs", &group).await.unwrap();
    let won = until(&mut campaign, "the lone campaign leads", |e| {
        e.is_this_campaign
    })
    .await;
    assert_eq!(won.leader_node, "ea");
    let refused = client
        .proclaim("jobs", &won, b"v2".to_vec())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("not proclaimed"), "{refused}");
    until(&mut campaign, "the value taken", |e| e.value == b"v2").await;
    let on_b = serve(&nodes[1], GrpcConfig::new(loopback)).unwrap();
    let mut other = Client::connect(&on_b.local_addr().to_string(), ClientOptions::default())
        .await
        .unwrap();
    let mut observer = other.observe("jobs", &group).await.unwrap();
    let seen = until(&mut observer, "the leader and its value", |e| {
        e.has_leader && !e.value.is_empty()
    })
    .await;
    assert_eq!(
        (seen.leader, seen.term, seen.value),
        (won.leader, won.term, b"v2".to_vec())
    );
}
