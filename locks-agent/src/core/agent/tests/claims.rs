//! Core tests of what the client is told it holds: a claim is reported once with its versions,
//! lost with a cause when it is no longer held in the claimed mode, and reported again when
//! granted again; asking for more or converting down loses nothing.

use super::*;

fn granted_effects(fx: &[AgentEffect]) -> Vec<&GrantedLock> {
    fx.iter()
        .filter_map(|e| match e {
            AgentEffect::Granted(g) => Some(g),
            _ => None,
        })
        .collect()
}

fn lost_effects(fx: &[AgentEffect]) -> Vec<&LostLock> {
    fx.iter()
        .filter_map(|e| match e {
            AgentEffect::Lost(l) => Some(l),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lease_expiry_is_reported_as_such_and_a_regrant_is_a_new_grant() {
    let opts = Options {
        await_nodes: true,
        ..Options::default()
    };
    let (n2, l) = (node("n2"), lock_id!["l"]);
    let mut c = core(1, opts);
    c.request(l.clone(), X, std::slice::from_ref(&n2), Req::All)
        .unwrap();
    c.receive(notice(&n2, &l, 5, EntryState::Granted(X)));
    assert_eq!(granted_effects(&c.settle())[0].nodes[..], [(n2.clone(), 5)]);
    let fx = c.node_down_because(&n2, LossCause::LeaseExpired);
    let lost = lost_effects(&fx);
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].cause, LossCause::LeaseExpired);
    assert_eq!(lost[0].nodes, vec![n2.clone()]);
    // Back: asked again, granted at a new version, reported again.
    c.node_up(&n2);
    c.receive(notice(&n2, &l, 9, EntryState::Granted(X)));
    let fx = c.settle();
    assert_eq!(granted_effects(&fx)[0].nodes[..], [(n2, 9)]);
    assert!(lost_effects(&fx).is_empty());
}

#[test]
fn asking_for_more_or_converting_down_loses_nothing() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), S, &[n1()], Req::All).unwrap();
    c.receive(notice(&n1(), &l, 2, EntryState::Granted(S)));
    assert_eq!(granted_effects(&c.settle()).len(), 1);
    // Converting up: the read stays claimed while the write waits.
    let mut fx = c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    fx.extend(c.receive(notice(
        &n1(),
        &l,
        2,
        EntryState::Converting {
            held: S,
            requested: X,
        },
    )));
    fx.extend(c.settle());
    assert!(lost_effects(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.request_on(&l).unwrap().claimed, Some(S));
    c.receive(notice(&n1(), &l, 3, EntryState::Granted(X)));
    let fx = c.settle();
    let granted = granted_effects(&fx);
    assert_eq!(
        (granted[0].mode, granted[0].nodes.to_vec()),
        (X, vec![(n1(), 3)])
    );
    // Converting down: told it holds the weaker mode, nothing lost.
    let mut fx = c.convert(&l, S).unwrap();
    fx.extend(c.settle());
    assert!(lost_effects(&fx).is_empty(), "{fx:?}");
    assert_eq!(c.request_on(&l).unwrap().claimed, Some(S));
}

#[test]
fn a_grant_the_server_takes_back_is_revoked() {
    let mut c = core(1, Options::default());
    let l = lock_id!["l"];
    c.request(l.clone(), X, &[n1()], Req::All).unwrap();
    c.receive(notice(&n1(), &l, 2, EntryState::Granted(X)));
    c.settle();
    c.receive(notice(&n1(), &l, 3, EntryState::Waiting(X)));
    let fx = c.settle();
    let lost = lost_effects(&fx);
    assert_eq!(lost.len(), 1, "{fx:?}");
    assert_eq!(lost[0].cause, LossCause::Revoked);
}
