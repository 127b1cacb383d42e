//! Members finding each other and losing track of each other through the views of the election
//! lock (module `society`): who is learnt, and who is forgotten as gone.

use super::tests::{Rec, T0, env, lock, member, n, requests, serve_locks_on, term, to_members};
use super::*;
use locks_core::proto::AgentMessage;
use locks_core::{Mode, ModeTable};
use locks_server::state_machine::LockTable;

/// A view of the election lock on `node` at `version` in which `waiting` wait.
fn watched(node: &str, version: u64, waiting: &[&AgentId]) -> AgentMessage {
    let waiting = waiting
        .iter()
        .map(|a| locks_core::proto::QueueEntry {
            agent: (*a).clone(),
            mode: Mode::WRITE,
        })
        .collect();
    AgentMessage::Watched {
        node: n(node),
        lock: lock(),
        view: Arc::new(LockView {
            version,
            waiting,
            ..LockView::default()
        }),
    }
}

/// A candidate is forgotten when the view of its own node stops listing it after listing it,
/// whatever other views say; one never listed at home stays while some view lists it and is
/// forgotten when none does.
#[test]
fn candidates_missing_from_the_views_are_forgotten() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let known = |w: &MemberCore<Rec>, a: &AgentId| w.s.members.contains_key(&MemberId::of_agent(a));

    let at_home = AgentId::new(n("b"), 1, 7);
    w.deliver(watched("b", 1, &[&at_home]), T0);
    w.deliver(watched("a", 1, &[&at_home]), T0);
    assert!(known(&w, &at_home));
    w.deliver(watched("b", 2, &[]), T0);
    assert!(!known(&w, &at_home), "gone from its own node's view");

    let elsewhere = AgentId::new(n("b"), 1, 8);
    w.deliver(watched("a", 2, &[&elsewhere]), T0);
    w.deliver(watched("b", 3, &[]), T0);
    assert!(
        known(&w, &elsewhere),
        "never listed at home, still listed on a"
    );
    w.deliver(watched("a", 3, &[]), T0);
    assert!(!known(&w, &elsewhere), "listed nowhere any more");
}

/// The messages `effects` send to members, with their recipients, in order.
fn messages(effects: &[MemberEffect<Rec>]) -> Vec<(MemberId, PeerMessage<Rec>)> {
    to_members(effects)
        .into_iter()
        .map(|(to, e)| (to, e.msg))
        .collect()
}

/// The nodes `effects` ask to watch the election lock, in order.
fn watches(effects: &[MemberEffect<Rec>]) -> Vec<NodeId> {
    requests(effects)
        .into_iter()
        .filter(|(_, r)| matches!(r, ServerRequest::Watch { .. }))
        .map(|(node, _)| node)
        .collect()
}

/// A member watches the lock on the first node and on its own node, not on the other nodes up, and
/// the new first node when the first node goes down; a node that comes up is watched only as the first node.
#[test]
fn a_member_watches_its_first_node_and_its_own_node() {
    let mut c = member("c", 1, Role::Candidate);
    let effects = c.start(&[n("a"), n("b"), n("d")], T0).unwrap();
    assert_eq!(watches(&effects), vec![n("a"), n("c")]);
    assert_eq!(watches(&c.node_up(&n("e"), T0)), Vec::<NodeId>::new());
    assert_eq!(watches(&c.node_down(&n("a"), T0)), vec![n("b")]);
    assert_eq!(watches(&c.node_up(&n("0"), T0)), vec![n("0")]);
    // A node that went down and came back is watched again.
    c.node_down(&n("c"), T0);
    assert_eq!(watches(&c.node_up(&n("c"), T0)), vec![n("c")]);
}

/// A candidate whose agent holds the lock on every node it asked (the first node) watches every node
/// up from then on, those that come up later too: it asks them all, and may lead.
#[test]
fn the_first_nodes_holder_watches_every_node() {
    let mut c = member("c", 1, Role::Candidate);
    let start = c.start(&[n("b"), n("d")], T0).unwrap();
    assert_eq!(watches(&start), vec![n("b"), n("c")]);
    let mut table = LockTable::new(n("b"), ModeTable::standard(), 1);
    let effects = serve_locks_on(&mut c, &n("b"), &mut table, &start);
    assert_eq!(watches(&effects), vec![n("d")]);
    assert_eq!(watches(&c.node_up(&n("e"), T0)), vec![n("e")]);
}

/// A member learnt from its `Hello` knows this one already: a candidate without a leader says
/// nothing back, a follower says `Hello` naming its leader, and a member without a leader told
/// of one says `Hello` to that leader.
#[test]
fn a_hello_is_answered_only_with_news_of_a_leader() {
    let hello = |leader: Option<Term>| env(Role::Candidate, None, PeerMsg::Hello { leader });
    let x = MemberId::new(n("b"), 1, 5);

    let mut c = member("a", 1, Role::Candidate);
    c.start(&[n("b")], T0).unwrap();
    let effects = c.peer(&x, hello(None), T0);
    assert!(to_members(&effects).is_empty(), "{effects:?}");
    assert!(c.s.members.contains_key(&x));

    let mut w = member("a", 1, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let l = MemberId::new(n("b"), 1, 2);
    let t = term(20, &l);
    let am = PeerMsg::AmLeader {
        term: t.clone(),
        grants: vec![],
        msg: "hi".to_string(),
    };
    w.peer(&l, env(Role::Candidate, None, am), T0);
    assert_eq!(w.leader(), Some(&t));
    let effects = w.peer(&x, hello(None), T0);
    let sent = messages(&effects);
    assert_eq!(
        sent,
        vec![(
            x.clone(),
            PeerMsg::Hello {
                leader: Some(t.clone())
            }
        )]
    );

    let mut v = member("a", 2, Role::Worker);
    v.start(&[n("b")], T0).unwrap();
    let effects = v.peer(&x, hello(Some(t.clone())), T0);
    let sent = messages(&effects);
    assert_eq!(sent, vec![(l.clone(), PeerMsg::Hello { leader: None })]);
    assert!(v.s.members.contains_key(&l));
    // Told again while still without a leader: it says `Hello` to the leader it knows.
    let z = MemberId::new(n("b"), 1, 6);
    let sent = messages(&v.peer(&z, hello(Some(t.clone())), T0));
    assert!(
        sent.contains(&(l.clone(), PeerMsg::Hello { leader: None })),
        "{sent:?}"
    );

    // A follower answers a sender it knows that has no leader (back from a partition), and
    // not one that follows another leader.
    let sent = messages(&w.peer(&x, hello(None), T0));
    assert_eq!(sent, vec![(x.clone(), PeerMsg::Hello { leader: Some(t) })]);
    let other = term(30, &MemberId::new(n("b"), 1, 9));
    let effects = w.peer(&x, hello(Some(other)), T0);
    assert!(
        !to_members(&effects)
            .iter()
            .any(|(to, e)| to == &x && matches!(e.msg, PeerMsg::Hello { .. })),
        "{effects:?}"
    );
}

/// A view that lists a member whose node is not up yet (the view came first) is not enough
/// to learn it; the node coming up is, without a new view.
#[test]
fn members_listed_before_their_node_is_up_are_learnt_when_it_comes_up() {
    let mut w = member("a", 1, Role::Worker);
    w.start(&[], T0).unwrap();
    let on_c = AgentId::new(n("c"), 1, 7);
    let effects = w.deliver(watched("a", 1, &[&on_c]), T0);
    assert!(to_members(&effects).is_empty(), "{effects:?}");
    let effects = w.node_up(&n("c"), T0);
    let m = MemberId::of_agent(&on_c);
    assert!(w.s.members.contains_key(&m));
    let sent = messages(&effects);
    assert_eq!(sent, vec![(m, PeerMsg::Hello { leader: None })]);
}

/// A candidate that finds another waiting in a view says nothing (that one finds it on the same
/// queue); it greets the holder, and a worker (on no queue) greets every candidate it finds.
#[test]
fn a_view_is_answered_with_hellos_only_where_they_tell_something() {
    let waiting = AgentId::new(n("b"), 1, 7);
    let holder = AgentId::new(n("b"), 1, 8);
    let view = AgentMessage::Watched {
        node: n("a"),
        lock: lock(),
        view: Arc::new(LockView {
            version: 1,
            granted: vec![locks_core::proto::QueueEntry {
                agent: holder.clone(),
                mode: Mode::WRITE,
            }],
            waiting: vec![locks_core::proto::QueueEntry {
                agent: waiting.clone(),
                mode: Mode::WRITE,
            }],
            ..LockView::default()
        }),
    };
    let greeted = |effects: &[MemberEffect<Rec>]| -> Vec<MemberId> {
        to_members(effects)
            .into_iter()
            .filter(|(_, e)| matches!(e.msg, PeerMsg::Hello { .. }))
            .map(|(to, _)| to)
            .collect()
    };
    let mut c = member("a", 1, Role::Candidate);
    c.start(&[n("b")], T0).unwrap();
    let effects = c.deliver(view.clone(), T0);
    assert_eq!(greeted(&effects), vec![MemberId::of_agent(&holder)]);
    assert!(c.s.members.contains_key(&MemberId::of_agent(&waiting)));

    let mut w = member("a", 2, Role::Worker);
    w.start(&[n("b")], T0).unwrap();
    let effects = w.deliver(view, T0);
    assert_eq!(
        greeted(&effects),
        vec![MemberId::of_agent(&holder), MemberId::of_agent(&waiting)]
    );
}
