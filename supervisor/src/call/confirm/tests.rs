use super::*;
use proptest::prelude::*;

fn details(session: &str, n: usize) -> ConfirmDetails {
    ConfirmDetails {
        session: session.into(),
        client: "agent".into(),
        call_id: format!("c{n}"),
        tool: "run_command".into(),
        description: format!("Run `job {n}` in ."),
        risk: Risk::High,
        locations: vec![".".into()],
        preview: Some(format!("job {n}")),
        args_sha256: format!("{n:064x}"),
    }
}

fn manager() -> Confirmations {
    Confirmations::new(Duration::from_secs(60))
}

const BY: &Answerer = &Answerer {
    session: String::new(),
    client: String::new(),
};

#[test]
fn ids_are_unique() {
    let m = manager();
    let now = Instant::now();
    let ids: HashSet<String> = (0..1000)
        .map(|n| m.register(details("s", n), now).0)
        .collect();
    assert_eq!(ids.len(), 1000);
    let other = manager();
    let (id, _rx) = other.register(details("s", 0), now);
    assert!(!ids.contains(&id), "another instance's ids differ");
}

#[tokio::test]
async fn answers_reach_their_own_receiver_under_concurrency() {
    let m = std::sync::Arc::new(manager());
    let now = Instant::now();
    let mut waiters = Vec::new();
    let mut ids = Vec::new();
    for n in 0..200 {
        let (id, rx) = m.register(details("s", n), now);
        ids.push((id, n % 3 != 0));
        waiters.push(tokio::spawn(async move { (n, rx.await) }));
    }
    // Answer in a scrambled order from other tasks.
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|i| (i * 7919) % 200);
    let mut answerers = Vec::new();
    for i in order {
        let (id, approve) = ids[i].clone();
        let m = m.clone();
        answerers.push(tokio::spawn(async move {
            m.answer(&id, approve, Remember::Once, BY).unwrap()
        }));
    }
    for a in answerers {
        a.await.unwrap();
    }
    for w in waiters {
        let (n, got) = w.await.unwrap();
        let want = if n % 3 != 0 {
            Answer::Approved
        } else {
            Answer::Rejected
        };
        assert_eq!(got.unwrap(), want, "call {n}");
    }
    assert!(m.pending(now).is_empty());
}

#[test]
fn unknown_or_finished_interactions_are_refused() {
    let m = manager();
    let (id, _rx) = m.register(details("s", 1), Instant::now());
    assert_eq!(m.answer(&id, true, Remember::Once, BY), Ok(()));
    assert_eq!(
        m.answer(&id, true, Remember::Once, BY),
        Err(UnknownInteraction(id.clone()))
    );
    assert!(m.answer("ix-nope-1", false, Remember::Once, BY).is_err());
}

#[test]
fn timeouts_use_the_time_given() {
    let m = manager();
    let t0 = Instant::now();
    let (a, mut rx_a) = m.register(details("s", 1), t0);
    let (b, mut rx_b) = m.register(details("s", 2), t0 + Duration::from_secs(30));
    assert_eq!(m.next_deadline(), Some(t0 + Duration::from_secs(60)));
    assert!(m.expire(t0 + Duration::from_secs(59)).is_empty());
    assert_eq!(m.expire(t0 + Duration::from_secs(60)), vec![a.clone()]);
    assert_eq!(rx_a.try_recv(), Ok(Answer::TimedOut));
    assert!(rx_b.try_recv().is_err(), "b still waits");
    let left = m.pending(t0 + Duration::from_secs(60));
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].interaction, b);
    assert_eq!(left[0].expires_in, Duration::from_secs(30));
    assert!(m.answer(&a, true, Remember::Once, BY).is_err(), "too late");
}

#[tokio::test]
async fn wait_times_out_at_the_deadline() {
    let m = Confirmations::new(Duration::ZERO);
    let (id, rx) = m.register(details("s", 1), Instant::now());
    assert_eq!(m.wait(&id, rx).await, Answer::TimedOut);
    assert!(m.pending(Instant::now()).is_empty());
    let m = manager();
    let (id, rx) = m.register(details("s", 2), Instant::now());
    m.answer(&id, false, Remember::Once, BY).unwrap();
    assert_eq!(m.wait(&id, rx).await, Answer::Rejected);
}

#[test]
fn cancel_and_disconnect_withdraw() {
    let m = manager();
    let now = Instant::now();
    let (a, mut rx_a) = m.register(details("s1", 1), now);
    let (b, mut rx_b) = m.register(details("s2", 2), now);
    let (c, mut rx_c) = m.register(details("s2", 3), now);
    assert!(m.withdraw(&a));
    assert!(!m.withdraw(&a));
    assert_eq!(rx_a.try_recv(), Ok(Answer::Withdrawn));
    let mut gone = m.end_session("s2");
    gone.sort();
    let mut want = vec![b.clone(), c.clone()];
    want.sort();
    assert_eq!(gone, want);
    assert_eq!(rx_b.try_recv(), Ok(Answer::Withdrawn));
    assert_eq!(rx_c.try_recv(), Ok(Answer::Withdrawn));
    assert!(m.pending(now).is_empty());
    assert!(m.answer(&b, true, Remember::Once, BY).is_err());
}

#[test]
fn a_new_timeout_applies_to_questions_asked_after_it() {
    let m = manager();
    let t0 = Instant::now();
    let (old, _rx_old) = m.register(details("s", 1), t0);
    m.set_timeout(Duration::from_secs(5));
    assert_eq!(m.timeout(), Duration::from_secs(5));
    let (new, _rx_new) = m.register(details("s", 2), t0);
    assert_eq!(m.expire(t0 + Duration::from_secs(5)), vec![new]);
    assert_eq!(m.expire(t0 + Duration::from_secs(60)), vec![old]);
}

#[test]
fn who_answered_is_kept_once_for_the_waiter() {
    let m = manager();
    let (id, _rx) = m.register(details("s", 1), Instant::now());
    let by = Answerer {
        session: "s7".into(),
        client: "toolvisor-cli".into(),
    };
    m.answer(&id, true, Remember::Once, &by).unwrap();
    assert_eq!(m.answered_by(&id), Some(by));
    assert_eq!(m.answered_by(&id), None);
    // An answer nobody waits for leaves nothing behind.
    let (id, rx) = m.register(details("s", 2), Instant::now());
    drop(rx);
    assert!(m.answer(&id, true, Remember::Once, BY).is_err());
    assert_eq!(m.answered_by(&id), None);
}

#[test]
fn an_answer_after_the_waiter_left_is_unknown() {
    let m = manager();
    let (id, rx) = m.register(details("s", 1), Instant::now());
    drop(rx);
    assert!(m.answer(&id, true, Remember::Once, BY).is_err());
}

#[test]
fn remember_session_is_per_session_tool_and_args() {
    let m = manager();
    let now = Instant::now();
    let d = details("s1", 7);
    let (id, _rx) = m.register(d.clone(), now);
    m.answer(&id, true, Remember::Session, BY).unwrap();
    assert!(m.is_remembered("s1", "run_command", &d.args_sha256));
    assert!(!m.is_remembered("s2", "run_command", &d.args_sha256));
    assert!(!m.is_remembered("s1", "kill_process", &d.args_sha256));
    assert!(!m.is_remembered("s1", "run_command", &details("s1", 8).args_sha256));
    // A "no" is never remembered, and a session's memory ends with it.
    let (id, _rx) = m.register(details("s1", 9), now);
    m.answer(&id, false, Remember::Session, BY).unwrap();
    assert!(!m.is_remembered("s1", "run_command", &details("s1", 9).args_sha256));
    m.end_session("s1");
    assert!(!m.is_remembered("s1", "run_command", &d.args_sha256));
}

#[test]
fn pending_replays_in_order_asked_with_full_details() {
    let m = manager();
    let now = Instant::now();
    let ids: Vec<String> = (0..5).map(|n| m.register(details("s", n), now).0).collect();
    let p = m.pending(now);
    assert_eq!(
        p.iter().map(|x| x.interaction.clone()).collect::<Vec<_>>(),
        ids
    );
    for (n, x) in p.iter().enumerate() {
        assert_eq!(x.details, details("s", n));
        assert!(!x.details.description.is_empty() && !x.details.locations.is_empty());
    }
}

proptest! {
    /// Properties 39/41: any interleaving of answers and withdrawals delivers
    /// each receiver its own outcome and nothing else.
    #[test]
    fn each_receiver_gets_its_own_outcome(ops in prop::collection::vec(0u8..3, 1..40),
                                          perm in any::<u64>()) {
        let m = manager();
        let now = Instant::now();
        let mut regs: Vec<(String, oneshot::Receiver<Answer>, u8)> = ops
            .iter()
            .enumerate()
            .map(|(n, op)| {
                let (id, rx) = m.register(details("s", n), now);
                (id, rx, *op)
            })
            .collect();
        let len = regs.len() as u64;
        let mut order: Vec<usize> = (0..regs.len()).collect();
        order.sort_by_key(|i| (*i as u64).wrapping_mul(perm | 1) % len.max(1));
        for i in order {
            let (id, _, op) = &regs[i];
            match op {
                0 => m.answer(id, true, Remember::Once, BY).unwrap(),
                1 => m.answer(id, false, Remember::Once, BY).unwrap(),
                _ => prop_assert!(m.withdraw(id)),
            }
        }
        for (_, rx, op) in regs.iter_mut() {
            let want = [Answer::Approved, Answer::Rejected, Answer::Withdrawn][*op as usize];
            prop_assert_eq!(rx.try_recv(), Ok(want));
        }
        prop_assert!(m.pending(now).is_empty());
    }
}
