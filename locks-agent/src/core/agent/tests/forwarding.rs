//! Forwarding: who passes which views to whom, once per version, again after a node returns,
//! and not back along the sender's own waits.

use super::*;

#[test]
fn the_smaller_agent_of_a_cycle_only_forwards() {
    let (x, y) = (lock_id!["x"], lock_id!["y"]);
    let mut c = two_cycle(1, 3, Options::default());
    let fx = c.settle();
    assert!(to_servers(&fx).is_empty());
    // It waits for 3 on [y]: it passes on what it knows, except what 3 sent it.
    assert_eq!(
        to_agents(&fx),
        vec![(agent(3), forward(1, &y, view(4, &[(3, X)], &[(1, X)])))]
    );
    let _ = x;
}

#[test]
fn forwards_go_once_per_version() {
    let y = lock_id!["y"];
    let mut c = core(1, Options::default());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&y, X, view(4, &[(3, X)], &[(1, X)])));
    assert_eq!(to_agents(&c.settle()).len(), 1);
    // A duplicate changes nothing; a newer queue goes out again.
    c.receive(waiting_notice(&y, X, view(4, &[(3, X)], &[(1, X)])));
    assert!(to_agents(&c.settle()).is_empty());
    c.receive(waiting_notice(&y, X, view(9, &[(3, X)], &[(1, X), (5, X)])));
    assert_eq!(
        to_agents(&c.settle()),
        vec![(
            agent(3),
            forward(1, &y, view(9, &[(3, X)], &[(1, X), (5, X)]))
        )]
    );
}

#[test]
fn forwards_lost_with_a_node_go_again_when_it_returns() {
    // Agent 1 (on n1) waits on [y] at n1 for agent 3, which lives on n2.
    let y = lock_id!["y"];
    let n2 = node("n2");
    let a3 = AgentId::new(n2.clone(), 1, 3);
    let queue = Arc::new(LockView {
        version: 4,
        group: Some(X),
        granted: vec![QueueEntry {
            agent: a3.clone(),
            mode: X,
        }],
        converting: vec![],
        waiting: vec![QueueEntry {
            agent: agent(1),
            mode: X,
        }],
    });
    let mut c = core(1, Options::default());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&y, X, queue.clone()));
    let sent = AgentMessage::Forward {
        from: agent(1),
        node: n1(),
        lock: y.clone(),
        view: queue,
    };
    assert_eq!(to_agents(&c.settle()), vec![(a3.clone(), sent.clone())]);
    // n2 goes down (the forward may have been lost with the connection): nothing goes to an
    // agent there while it is down, and the same view goes again once it is back.
    c.node_down(&n2);
    assert!(to_agents(&c.settle()).is_empty());
    c.node_up(&n2);
    assert_eq!(to_agents(&c.settle()), vec![(a3.clone(), sent.clone())]);
    // The same when the agent never heard of n2 before it came up: it learnt of agent 3 from
    // n1's queue while n2 was not connected to this node.
    let mut c = core(1, Options::default());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(
        &y,
        X,
        match &sent {
            AgentMessage::Forward { view, .. } => view.clone(),
            _ => unreachable!(),
        },
    ));
    assert_eq!(to_agents(&c.settle()), vec![(a3.clone(), sent.clone())]);
    assert!(to_agents(&c.settle()).is_empty());
    c.node_up(&n2);
    assert_eq!(to_agents(&c.settle()), vec![(a3, sent)]);
}

#[test]
fn a_view_every_waiter_was_sent_goes_to_the_holder_from_the_first_waiter_only() {
    let y = lock_id!["y"];
    let mut c = core(1, Options::default());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&y, X, view(4, &[(3, X)], &[(5, X), (1, X)])));
    // Nobody waits for 1: it tells the holder, not 5 queued ahead of it.
    let sent: Vec<AgentId> = to_agents(&c.settle()).into_iter().map(|(a, _)| a).collect();
    assert_eq!(sent, vec![agent(3)]);
    // The holder changed while 1 waited: the server told 5 as well (table rule 3), and 5, the
    // first waiter the new holder blocks, forwards it to the holder.
    c.receive(waiting_notice(&y, X, view(9, &[(6, X)], &[(5, X), (1, X)])));
    assert!(to_agents(&c.settle()).is_empty());
    // Now 1 is that first waiter.
    c.receive(waiting_notice(&y, X, view(12, &[(5, X)], &[(1, X)])));
    assert_eq!(
        to_agents(&c.settle()),
        vec![(agent(5), forward(1, &y, view(12, &[(5, X)], &[(1, X)])))]
    );
}

#[test]
fn a_forwarded_view_is_not_sent_on_to_those_its_sender_waits_for() {
    let y = lock_id!["y"];
    let mut c = core(2, Options::default());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&y, X, view(4, &[(3, X)], &[(1, X), (2, X)])));
    assert_eq!(
        to_agents(&c.settle()).len(),
        1,
        "the holder only: nobody waits for 2"
    );
    // 6 waits for 5, which forwards the queue to everyone ahead of it: 2 need not.
    c.receive(forward(
        5,
        &y,
        view(6, &[(3, X)], &[(1, X), (2, X), (5, X), (6, X)]),
    ));
    assert!(to_agents(&c.settle()).is_empty());
    // When nobody waits for the sender, it told only the holder: 1 has not heard of 2.
    let mut c = core(2, Options::default());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(&y, X, view(4, &[(3, X)], &[(1, X), (2, X)])));
    c.settle();
    c.receive(forward(
        5,
        &y,
        view(6, &[(3, X)], &[(1, X), (2, X), (5, X)]),
    ));
    assert_eq!(
        to_agents(&c.settle()),
        vec![(
            agent(1),
            forward(2, &y, view(6, &[(3, X)], &[(1, X), (2, X), (5, X)]))
        )]
    );
}

#[test]
fn an_agent_someone_waits_for_tells_those_queued_ahead_of_it() {
    let y = lock_id!["y"];
    let mut c = core(2, Options::default());
    c.request(y.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(waiting_notice(
        &y,
        X,
        view(4, &[(3, X)], &[(1, X), (2, X), (4, X)]),
    ));
    let sent: Vec<AgentId> = to_agents(&c.settle()).into_iter().map(|(a, _)| a).collect();
    assert_eq!(sent, vec![agent(1), agent(3)]);
}
