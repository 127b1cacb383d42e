//! The pure parts of introspection: the answer budget, fitting a report in a frame, matching
//! answers to questions, and the wait-for graph with its renderings.

use super::*;
use locks_core::proto::{Conversion, LockReport, LockView, QueueEntry};
use locks_core::{AgentId, LockId, Mode, lock_id};

fn n(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn a(node: &str, serial: u64) -> AgentId {
    AgentId::new(n(node), 1, serial)
}

fn entry(agent: &AgentId, mode: Mode) -> QueueEntry {
    QueueEntry {
        agent: agent.clone(),
        mode,
    }
}

fn lock(lock: LockId, granted: Vec<QueueEntry>, waiting: Vec<QueueEntry>) -> LockReport {
    LockReport {
        lock,
        view: LockView {
            version: 5,
            group: granted.first().map(|e| e.mode),
            granted,
            converting: vec![],
            waiting,
        },
    }
}

fn table(node: &str, locks: Vec<LockReport>) -> TableReport {
    TableReport {
        id: 0,
        node: n(node),
        version: 9,
        total_locks: locks.len() as u64,
        locks,
    }
}

fn view(tables: Vec<TableReport>, missing: &[&str]) -> ClusterView {
    ClusterView {
        nodes: tables.into_iter().map(|t| (t.node.clone(), t)).collect(),
        missing: missing.iter().map(|m| n(m)).collect(),
    }
}

#[test]
fn a_peer_gets_its_burst_then_one_answer_per_refill() {
    let mut budget = AnswerBudget::default();
    let t0 = Instant::now();
    let (p, q) = (n("p"), n("q"));
    let answered = (0..100).filter(|_| budget.allow(&p, t0)).count();
    assert_eq!(answered, ANSWER_BURST as usize);
    // Another peer has a budget of its own.
    assert!(budget.allow(&q, t0));
    // One refill later, one more; a long pause refills the burst, no more.
    assert!(budget.allow(&p, t0 + ANSWER_REFILL));
    assert!(!budget.allow(&p, t0 + ANSWER_REFILL));
    let later = t0 + ANSWER_REFILL * 1000;
    let answered = (0..100).filter(|_| budget.allow(&p, later)).count();
    assert_eq!(answered, ANSWER_BURST as usize);
    // A clock going backwards earns nothing and panics nowhere.
    assert!(!budget.allow(&p, t0));
}

#[test]
fn the_budget_remembers_a_bounded_number_of_peers() {
    let mut budget = AnswerBudget::default();
    let t0 = Instant::now();
    for i in 0..(MAX_TRACKED_PEERS * 3) {
        budget.allow(&n(&format!("p{i}")), t0);
        assert!(budget.peers.len() <= MAX_TRACKED_PEERS);
    }
}

#[test]
fn a_report_too_large_for_the_frame_lists_fewer_locks_and_says_so() {
    let t1 = a("n1", 1);
    let locks: Vec<LockReport> = (0..200)
        .map(|i| lock(lock_id!["k", i], vec![entry(&t1, Mode::X)], vec![]))
        .collect();
    let report = table("n1", locks);
    let whole = codec::encode(
        &Envelope::new(Message::TableReport(report.clone())),
        usize::MAX,
    )
    .unwrap()
    .len();
    let envelope = fit(report.clone(), whole / 3).expect("a part fits");
    let Message::TableReport(fitted) = envelope.message else {
        panic!("a table report");
    };
    assert!(fitted.truncated());
    assert_eq!(fitted.total_locks, 200);
    assert!(!fitted.locks.is_empty() && fitted.locks.len() < 200);
    assert_eq!(fitted.locks[..], report.locks[..fitted.locks.len()]);
    // What fits is sent whole; nothing fits in a handful of bytes.
    assert_eq!(
        fit(report.clone(), whole).map(|e| e.message),
        Some(Message::TableReport(report.clone()))
    );
    assert_eq!(fit(report, 8), None);
}

#[test]
fn an_answer_reaches_its_caller_only_from_the_node_asked() {
    let intro = Introspection::default();
    let (id, mut rx) = intro.ask(n("b"));
    let mut report = table("b", vec![]);
    report.id = id;
    // From another node, or naming another node: dropped, and the question still waits.
    intro.answered(&n("c"), report.clone());
    let mut forged = report.clone();
    forged.node = n("c");
    intro.answered(&n("b"), forged);
    // Never asked: dropped.
    let mut stray = report.clone();
    stray.id = id + 100;
    intro.answered(&n("b"), stray);
    assert_eq!(intro.in_flight(), 1);
    assert_eq!(rx.try_recv().unwrap(), None);
    intro.answered(&n("b"), report.clone());
    assert_eq!(rx.try_recv().unwrap(), Some(report.clone()));
    assert_eq!(intro.in_flight(), 0);
    // Late (answered already): dropped.
    intro.answered(&n("b"), report);
    assert_eq!(intro.in_flight(), 0);
}

#[test]
fn a_question_given_up_is_forgotten() {
    let intro = Introspection::default();
    let (id, _rx) = intro.ask(n("b"));
    {
        let _asked = Asked { intro: &intro, id };
        assert_eq!(intro.in_flight(), 1);
    }
    assert_eq!(intro.in_flight(), 0);
}

/// t2 (of n2) waits on n1 for x, held by t1 (of n1); t3 waits behind t2.
fn cross_node_wait() -> ClusterView {
    let (t1, t2, t3) = (a("n1", 1), a("n2", 1), a("n3", 1));
    view(
        vec![
            table(
                "n1",
                vec![lock(
                    lock_id!["x"],
                    vec![entry(&t1, Mode::X)],
                    vec![entry(&t2, Mode::X), entry(&t3, Mode::S)],
                )],
            ),
            table("n2", vec![]),
        ],
        &["n3"],
    )
}

#[test]
fn a_cross_node_wait_is_an_edge_labelled_with_the_lock_and_its_node() {
    let graph = cross_node_wait().wait_for_graph(&ModeTable::default());
    assert_eq!(
        graph.text_lines(),
        [
            "edge <n2.1.1> <n1.1.1> x@n1",
            "edge <n3.1.1> <n1.1.1> x@n1",
            "edge <n3.1.1> <n2.1.1> x@n1",
        ]
    );
    assert_eq!(graph.missing, [n("n3")]);
    assert!(graph.truncated.is_empty());
    assert!(graph.edges.iter().all(|e| !e.in_cycle));
}

/// t1 waits for t2 on y@n2 while t2 waits for t1 on x@n1: a deadlock only the union shows;
/// t3 waits for t1 without being on the cycle.
fn cross_node_cycle() -> ClusterView {
    let (t1, t2, t3) = (a("n1", 1), a("n2", 1), a("n3", 1));
    view(
        vec![
            table(
                "n1",
                vec![lock(
                    lock_id!["x"],
                    vec![entry(&t1, Mode::X)],
                    vec![entry(&t2, Mode::X)],
                )],
            ),
            table(
                "n2",
                vec![
                    lock(
                        lock_id!["y"],
                        vec![entry(&t2, Mode::X)],
                        vec![entry(&t1, Mode::X)],
                    ),
                    lock(
                        lock_id!["z", "w"],
                        vec![entry(&t1, Mode::S)],
                        vec![entry(&t3, Mode::X)],
                    ),
                ],
            ),
        ],
        &[],
    )
}

#[test]
fn a_cycle_across_nodes_is_marked_on_its_edges_only() {
    let graph = cross_node_cycle().wait_for_graph(&ModeTable::default());
    assert_eq!(
        graph.text_lines(),
        [
            "edge <n1.1.1> <n2.1.1> y@n2 cycle",
            "edge <n2.1.1> <n1.1.1> x@n1 cycle",
            "edge <n3.1.1> <n1.1.1> z/w@n2",
        ]
    );
}

#[test]
fn a_converter_waits_for_the_other_holders() {
    let (t1, t2) = (a("n1", 1), a("n1", 2));
    let mut report = lock(
        lock_id!["x"],
        vec![entry(&t1, Mode::S), entry(&t2, Mode::S)],
        vec![],
    );
    report.view.converting = vec![Conversion {
        agent: t1.clone(),
        held: Mode::S,
        requested: Mode::X,
    }];
    let graph = view(vec![table("n1", vec![report])], &[]).wait_for_graph(&ModeTable::default());
    assert_eq!(graph.text_lines(), ["edge <n1.1.1> <n1.1.2> x@n1"]);
}

/// The structure of a DOT text: balanced braces and quotes, one edge statement per edge.
fn check_dot(dot: &str, edges: usize) {
    assert!(dot.starts_with("digraph waits {\n"), "{dot}");
    assert!(dot.ends_with("}\n"), "{dot}");
    let mut depth = 0i32;
    let mut in_quotes = false;
    let mut escaped = false;
    for c in dot.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '{' if !in_quotes => depth += 1,
            '}' if !in_quotes => {
                depth -= 1;
                assert!(depth >= 0, "{dot}");
            }
            '\n' => assert!(!in_quotes, "a line break inside quotes: {dot}"),
            _ => {}
        }
    }
    assert_eq!((depth, in_quotes), (0, false), "{dot}");
    let edge_lines = dot.lines().filter(|l| l.contains(" -> ")).count();
    assert_eq!(edge_lines, edges, "{dot}");
    for line in dot.lines().filter(|l| l.contains(" -> ")) {
        assert!(
            line.trim_start().starts_with('"') && line.ends_with("];"),
            "{line}"
        );
    }
}

#[test]
fn the_dot_rendering_is_well_formed_and_marks_the_cycle() {
    let graph = cross_node_cycle().wait_for_graph(&ModeTable::default());
    let dot = graph.to_dot();
    check_dot(&dot, 3);
    assert!(dot.contains("  \"<n2.1.1>\" -> \"<n1.1.1>\" [label=\"x@n1\", color=red];\n"));
    assert!(dot.contains("  \"<n3.1.1>\" -> \"<n1.1.1>\" [label=\"z/w@n2\"];\n"));
    let partial = cross_node_wait()
        .wait_for_graph(&ModeTable::default())
        .to_dot();
    check_dot(&partial, 3);
    assert!(partial.contains("  // missing: n3\n"), "{partial}");
}

#[test]
fn lock_keys_cannot_break_out_of_their_dot_label() {
    let (t1, t2) = (a("n1", 1), a("n1", 2));
    let nasty = lock_id!["a\"b\\", "c\nd}", "{"];
    let report = lock(nasty, vec![entry(&t1, Mode::X)], vec![entry(&t2, Mode::X)]);
    let graph = view(vec![table("n1", vec![report])], &[]).wait_for_graph(&ModeTable::default());
    let dot = graph.to_dot();
    check_dot(&dot, 1);
    assert!(dot.contains(r#"[label="a\"b\\/c%0Ad}/{@n1"]"#), "{dot}");
}

#[test]
fn a_long_queue_gives_the_edges_of_its_first_waiters_up_to_the_bound() {
    // 200 writers wait behind one: waiter k waits for the holder and the k - 1 ahead.
    let holder = a("n1", 1_000);
    let waiters: Vec<AgentId> = (0..200).map(|k| a("n1", k)).collect();
    let long = |waiters: &[AgentId]| {
        view(
            vec![
                table(
                    "n1",
                    vec![lock(
                        lock_id!["hot"],
                        vec![entry(&holder, Mode::X)],
                        waiters.iter().map(|w| entry(w, Mode::X)).collect(),
                    )],
                ),
                table(
                    "n2",
                    vec![lock(
                        lock_id!["calm"],
                        vec![entry(&a("n2", 1), Mode::X)],
                        vec![entry(&a("n2", 2), Mode::X)],
                    )],
                ),
            ],
            &[],
        )
    };
    let modes = ModeTable::default();
    let whole = graph::wait_for_graph_within(&long(&waiters), &modes, usize::MAX);
    assert_eq!(whole.edges.len(), 200 * 201 / 2 + 1);
    assert!(whole.truncated.is_empty());
    let cut = graph::wait_for_graph_within(&long(&waiters), &modes, 100);
    // k waiters imply at most k × (1 + k) edges by the bound: 9 fit in 100 (45 edges), and
    // n2's queue after them.
    assert_eq!(cut.truncated, [n("n1")]);
    assert_eq!(cut.edges.len(), 45 + 1);
    let first: Vec<WaitEdge> = graph::wait_for_graph_within(&long(&waiters[..9]), &modes, 100)
        .edges
        .into_iter()
        .filter(|e| e.node == n("n1"))
        .collect();
    let cut_n1: Vec<WaitEdge> = cut
        .edges
        .iter()
        .filter(|e| e.node == n("n1"))
        .cloned()
        .collect();
    assert_eq!(cut_n1, first);
    // Nothing left for n2's queue: it is cut too.
    let tight = graph::wait_for_graph_within(&long(&waiters), &modes, 1);
    assert!(tight.edges.is_empty());
    assert_eq!(tight.truncated, [n("n1"), n("n2")]);
    let capped = long(&waiters).wait_for_graph(&modes);
    assert!(capped.edges.len() <= graph::MAX_EDGES);
    assert_eq!(capped.truncated, [n("n1")]);
}

#[test]
fn an_empty_view_renders_an_empty_graph() {
    let graph = ClusterView::default().wait_for_graph(&ModeTable::default());
    assert!(graph.text_lines().is_empty());
    check_dot(&graph.to_dot(), 0);
}

#[test]
fn a_table_reports_its_first_locks_by_id_and_how_many_it_has() {
    use crate::table::LockTable;
    use locks_core::proto::ServerRequest;
    let mut t = LockTable::new(n("n1"), ModeTable::default(), 0);
    let t1 = a("n1", 1);
    // Inserted out of order, so the heap has to keep the smallest ids.
    for i in [7i64, 3, 9, 1, 5, 8, 2, 6, 4, 0] {
        t.handle(ServerRequest::Lock {
            agent: t1.clone(),
            lock: lock_id!["k", i],
            mode: Mode::S,
        });
    }
    // Each lock and its parent ["k"].
    let all = t.report(usize::MAX);
    assert_eq!(all.total_locks, 11);
    assert!(!all.truncated());
    let first = t.report(4);
    assert_eq!(first.total_locks, 11);
    assert!(first.truncated());
    let ids: Vec<LockId> = first.locks.iter().map(|l| l.lock.clone()).collect();
    assert_eq!(
        ids,
        [
            lock_id!["k"],
            lock_id!["k", 0],
            lock_id!["k", 1],
            lock_id!["k", 2]
        ]
    );
    assert_eq!(first.locks[..], all.locks[..4]);
    assert_eq!(t.report(0).locks, []);
    // The same queues as the snapshot.
    let snapshot = t.snapshot();
    for (reported, snap) in all.locks.iter().zip(&snapshot.locks) {
        assert_eq!((&reported.lock, &reported.view), (&snap.lock, &snap.view()));
    }
}

#[test]
fn a_slash_path_is_one_token_whatever_its_keys_hold_and_reads_back() {
    use super::graph::{key_from_slash, slash};
    use locks_core::{Key, LockId};
    let forged = "x\ngranted t9 db/x a@1\nend-table";
    let keys = [
        forged,
        "caf\u{e9}",
        "a/b@c,d%e",
        "\u{202e}\u{200b}",
        "\x1b[2J",
    ];
    let lock = LockId::new(keys.iter().map(|k| Key::from(*k))).unwrap();
    let path = slash(&lock);
    assert!(
        path.bytes().all(|b| b.is_ascii_graphic()),
        "{path:?} is not one token"
    );
    assert!(path.starts_with("x%0Agranted%20t9%20db%2Fx%20a%401%0Aend-table/caf%C3%A9/"));
    let back: Vec<Key> = path
        .split('/')
        .map(|s| key_from_slash(s).unwrap())
        .collect();
    assert_eq!(back, lock.keys());
    assert!(key_from_slash("a%2").is_err());
    assert!(key_from_slash("a%zz").is_err());
    assert!(key_from_slash("%ff").is_err());
}

#[test]
fn a_lock_id_in_a_log_line_stays_on_it() {
    let lock = locks_core::lock_id!["x\nERROR forged", "\x1b[2J"];
    assert_eq!(lock.to_string(), "[x\\nERROR forged, \\u{1b}[2J]");
}
