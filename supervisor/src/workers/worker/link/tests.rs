use super::*;
use ractor::{Actor, ActorProcessingErr};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use toolvisor_protocol::Status;

/// Stands in for the worker actor: says which process's reader reported what.
struct Recorder;

impl Actor for Recorder {
    type Msg = WorkerMsg;
    type State = mpsc::UnboundedSender<(u64, String)>;
    type Arguments = mpsc::UnboundedSender<(u64, String)>;

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let seen = match msg {
            WorkerMsg::Violation { generation, why } => (generation, why),
            WorkerMsg::Eof { generation } => (generation, "eof".to_owned()),
            _ => (0, "other".to_owned()),
        };
        let _ = tx.send(seen);
        Ok(())
    }
}

/// A link of process `generation` (its pid too), and the worker's end of it.
async fn link(generation: u64, actor: &ActorRef<WorkerMsg>) -> (Arc<Link>, tokio::net::UnixStream) {
    let (ours, worker) = UnixStream::pair().unwrap();
    let reader = ReaderArgs {
        actor: actor.clone(),
        generation,
        max_frame: 1 << 20,
        announce: None,
        events: Events::new(),
        group: "test".into(),
    };
    let link = Link::open(generation as u32, ours, Arc::default(), reader);
    (link, worker)
}

async fn send(worker: &mut tokio::net::UnixStream, msg: &FromWorker) {
    worker
        .write_all(&frame::encode(msg).unwrap())
        .await
        .unwrap();
}

fn done(call: u64, content: &str) -> FromWorker {
    FromWorker::Done {
        call,
        outcome: Outcome::ok(content.into()),
    }
}

async fn submit(link: &Link, call: u64) -> oneshot::Receiver<Reply> {
    let run = frame::encode(&ToWorker::Cancel { call }).unwrap();
    link.submit(run, call, None, false).await.unwrap()
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(u64, String)>) -> (u64, String) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the reader reports")
        .expect("the recorder lives")
}

async fn answer(rx: oneshot::Receiver<Reply>) -> Reply {
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("answered")
        .expect("a reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_trusted_for_its_own_calls_only() {
    let (tx, mut seen) = mpsc::unbounded_channel();
    let (actor, _) = Actor::spawn(None, Recorder, tx).await.unwrap();
    let (a, mut worker_a) = link(1, &actor).await;
    let (b, mut worker_b) = link(2, &actor).await;
    let mut victim = submit(&a, 7).await;
    let own = submit(&b, 8).await;

    // Worker b forges the result of a's call: b is given up, its own call crashed.
    send(&mut worker_b, &done(7, "all tests passed")).await;
    let (generation, why) = next(&mut seen).await;
    assert_eq!(generation, 2);
    assert!(why.contains("call 7, which is not in flight"), "{why}");
    assert!(matches!(answer(own).await, Reply::Crashed(w) if w == why));
    assert_eq!(b.in_flight(), 0);
    // Whatever b sends after that is not read.
    send(&mut worker_b, &done(7, "all tests passed")).await;

    // a's call is untouched, and takes its own worker's answer.
    assert!(a.has(7));
    assert!(victim.try_recv().is_err(), "not answered by the forgery");
    send(&mut worker_a, &done(7, "exit 3")).await;
    match answer(victim).await {
        Reply::Done(o) => assert_eq!((o.status, o.content.as_str()), (Status::Ok, "exit 3")),
        other => panic!("{other:?}"),
    }

    // A call a answered already is not a's any more either.
    send(&mut worker_a, &done(7, "again")).await;
    let (generation, why) = next(&mut seen).await;
    assert_eq!(generation, 1);
    assert!(why.contains("`done` for call 7"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_for_another_call_or_a_frame_that_does_not_decode_is_a_violation() {
    let (tx, mut seen) = mpsc::unbounded_channel();
    let (actor, _) = Actor::spawn(None, Recorder, tx).await.unwrap();

    // Output for a call it was not given (a number that was never dispatched).
    let (a, mut worker_a) = link(1, &actor).await;
    let call = submit(&a, 3).await;
    let output = FromWorker::Output {
        call: 4,
        stream: "stdout".into(),
        data: "x".into(),
    };
    send(&mut worker_a, &output).await;
    let (generation, why) = next(&mut seen).await;
    assert_eq!(generation, 1);
    assert!(why.contains("`output` for call 4"), "{why}");
    assert!(matches!(answer(call).await, Reply::Crashed(_)));

    // Garbage: its calls crash, it is given up.
    let (b, mut worker_b) = link(2, &actor).await;
    let call = submit(&b, 5).await;
    worker_b
        .write_all(b"\x00\x00\x00\x04\xc1\xc1\xc1\xc1")
        .await
        .unwrap();
    let (generation, why) = next(&mut seen).await;
    assert_eq!(generation, 2);
    assert!(why.contains("does not decode"), "{why}");
    assert!(matches!(answer(call).await, Reply::Crashed(_)));

    // A frame announcing more than the limit.
    let (c, mut worker_c) = link(3, &actor).await;
    let _call = submit(&c, 6).await;
    worker_c.write_all(b"\xff\xff\xff\x7f").await.unwrap();
    let (generation, why) = next(&mut seen).await;
    assert_eq!(generation, 3);
    assert!(why.contains("cannot be read"), "{why}");

    // An honest worker: output, then its answer, then EOF; no violation.
    let (d, mut worker_d) = link(4, &actor).await;
    let (out_tx, mut out_rx) = mpsc::channel(4);
    let run = frame::encode(&ToWorker::Cancel { call: 9 }).unwrap();
    let call = d.submit(run, 9, Some(out_tx), false).await.unwrap();
    let output = FromWorker::Output {
        call: 9,
        stream: "stdout".into(),
        data: "hi".into(),
    };
    send(&mut worker_d, &output).await;
    send(&mut worker_d, &done(9, "hi")).await;
    assert_eq!(out_rx.recv().await, Some(("stdout".into(), "hi".into())));
    assert!(matches!(answer(call).await, Reply::Done(_)));
    drop(worker_d);
    assert_eq!(next(&mut seen).await, (4, "eof".to_owned()));
}
