//! The pool's actor: it owns the group's worker actors (spawned linked to it, so it
//! hears when one fails or ends), starts a panicked one again, and grows or shrinks
//! the group on a reload. It publishes the current workers to the dispatch side as a
//! roster snapshot; calls never pass through its mailbox.

use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::watch;
use toolvisor_protocol::worker::WorkerInit;

use super::{PoolSpec, Roster};
use crate::workers::fairq::FairQueue;
use crate::workers::restart::RestartPolicy;
use crate::workers::worker::{
    Reconfig, WorkerActor, WorkerArgs, WorkerMsg, WorkerShared, WorkerState,
};

pub enum PoolMsg {
    /// Grow or shrink to `count` workers (SIGHUP); new ones start with the reloaded
    /// configuration. Answered once new workers are spawned and the others told to
    /// retire (not once they have).
    Resize {
        count: usize,
        reconfig: Box<Reconfig>,
        reply: RpcReplyPort<()>,
    },
}

pub struct PoolArgs {
    pub(super) spec: PoolSpec,
    pub(super) workers: Vec<Arc<WorkerShared>>,
    pub(super) roster: Roster,
    pub(super) changed: watch::Sender<u64>,
    pub(super) queue: Arc<FairQueue>,
}

pub struct PoolActor;

pub struct PoolState {
    spec: PoolSpec,
    /// Workers `0..count`, each with its actor at the same position in `actors`.
    workers: Vec<Arc<WorkerShared>>,
    actors: Vec<ActorCell>,
    /// Workers leaving after a shrink, until their actors end.
    retiring: Vec<(Arc<WorkerShared>, ActorCell)>,
    roster: Roster,
    changed: watch::Sender<u64>,
    queue: Arc<FairQueue>,
}

impl PoolState {
    /// Show the current workers (and the retiring ones) to the dispatch side.
    fn publish(&self) {
        let mut all = self.workers.clone();
        all.extend(self.retiring.iter().map(|(w, _)| w.clone()));
        *self.roster.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(all);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Take a reloaded configuration for workers started from now on, then grow (new
    /// indices after the last) or shrink (the highest indices retire after their calls).
    async fn resize(&mut self, myself: &ActorRef<PoolMsg>, count: usize, r: Reconfig) {
        self.spec.init = WorkerInit {
            group: self.spec.group.clone(),
            ..r.init
        };
        self.spec.spawn.passthrough = r.passthrough;
        self.spec.policy = RestartPolicy::new(r.supervisor);
        let before = self.workers.len();
        if count < before {
            let workers = self.workers.split_off(count);
            let actors = self.actors.split_off(count);
            for (w, a) in workers.into_iter().zip(actors) {
                if let Some(actor) = w.actor_ref() {
                    let _ = actor.cast(WorkerMsg::Retire);
                }
                self.retiring.push((w, a));
            }
        }
        for i in before..count {
            let shared = WorkerShared::new(
                &self.spec.group,
                i as u32,
                self.changed.clone(),
                self.queue.clone(),
            );
            self.workers.push(shared);
            self.actors.push(myself.get_cell());
            if let Err(e) = self.spawn_worker(myself, i).await {
                tracing::error!(group = %self.spec.group, index = i, "cannot start a new worker: {e}");
            }
        }
        if count != before {
            tracing::info!(group = %self.spec.group, from = before, to = count, "worker count changed");
        }
        self.publish();
    }

    async fn spawn_worker(
        &mut self,
        myself: &ActorRef<PoolMsg>,
        i: usize,
    ) -> Result<(), ActorProcessingErr> {
        let args = WorkerArgs {
            shared: self.workers[i].clone(),
            spawner: self.spec.spawner.clone(),
            spec: self.spec.spawn.clone(),
            init: WorkerInit {
                index: i as u32,
                ..self.spec.init.clone()
            },
            policy: self.spec.policy.clone(),
            events: self.spec.events.clone(),
            announce: self.spec.announce.clone(),
        };
        let (actor, _) = Actor::spawn_linked(None, WorkerActor, args, myself.get_cell()).await?;
        self.actors[i] = actor.get_cell();
        Ok(())
    }
}

impl Actor for PoolActor {
    type Msg = PoolMsg;
    type State = PoolState;
    type Arguments = PoolArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<PoolMsg>,
        args: PoolArgs,
    ) -> Result<PoolState, ActorProcessingErr> {
        let n = args.workers.len();
        let mut st = PoolState {
            spec: args.spec,
            workers: args.workers,
            actors: Vec::with_capacity(n),
            retiring: Vec::new(),
            roster: args.roster,
            changed: args.changed,
            queue: args.queue,
        };
        for i in 0..n {
            st.actors.push(myself.get_cell());
            st.spawn_worker(&myself, i).await?;
        }
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<PoolMsg>,
        msg: PoolMsg,
        st: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PoolMsg::Resize {
                count,
                reconfig,
                reply,
            } => {
                st.resize(&myself, count, *reconfig).await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    /// A worker actor that panicked or stopped is started again; its process was
    /// killed when its state dropped, and the new actor starts a new one. A retired
    /// worker's actor ending takes it off the roster.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<PoolMsg>,
        evt: SupervisionEvent,
        st: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        let cell = match &evt {
            SupervisionEvent::ActorFailed(cell, e) => {
                tracing::error!("a worker actor failed: {e}");
                cell.clone()
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => cell.clone(),
            _ => return Ok(()),
        };
        if let Some(r) = st
            .retiring
            .iter()
            .position(|(_, a)| a.get_id() == cell.get_id())
        {
            st.retiring.remove(r);
            st.publish();
            return Ok(());
        }
        let Some(i) = st.actors.iter().position(|a| a.get_id() == cell.get_id()) else {
            return Ok(());
        };
        if st.workers[i].state() == WorkerState::Stopping {
            return Ok(());
        }
        if let Err(e) = st.spawn_worker(&myself, i).await {
            tracing::error!("cannot restart worker actor {i}: {e}");
        }
        Ok(())
    }
}
