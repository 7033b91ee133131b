//! The listener actor: accepts connections on the socket, closes at once those from
//! another uid (SO_PEERCRED), and starts one session actor per connection, which it
//! supervises (a session that panics only loses its own connection).

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::net::UnixListener;

use crate::call::service::Service;
use crate::session::actor::{SessionActor, SessionArgs};

/// The listener takes no messages: it only accepts connections until it is stopped.
pub enum ListenerMsg {}

/// What the listener starts with.
pub struct ListenerArgs {
    /// The service every session serves.
    pub service: Arc<Service>,
    /// The bound socket.
    pub listener: UnixListener,
}

/// The actor accepting connections: one session actor per client, supervised by it.
pub struct Listener;

/// The accept loop, ended with the actor.
pub struct ListenerState {
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for ListenerState {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Actor for Listener {
    type Msg = ListenerMsg;
    type State = ListenerState;
    type Arguments = ListenerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ListenerMsg>,
        args: ListenerArgs,
    ) -> Result<ListenerState, ActorProcessingErr> {
        let accept = tokio::spawn(accept_loop(args.listener, args.service, myself));
        Ok(ListenerState { accept })
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<ListenerMsg>,
        evt: SupervisionEvent,
        _: &mut ListenerState,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(_, e) = evt {
            tracing::error!("a session failed: {e}");
        }
        Ok(())
    }
}

async fn accept_loop(listener: UnixListener, service: Arc<Service>, me: ActorRef<ListenerMsg>) {
    let my_uid = nix::unistd::getuid().as_raw();
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning (as OpenSSH does).
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Ok(cred) = stream.peer_cred() else {
            continue;
        };
        if cred.uid() != my_uid {
            tracing::warn!(uid = cred.uid(), pid = ?cred.pid(), "refused a connection from another uid");
            continue; // dropping the stream closes it
        }
        let peer = crate::session::peer::classify(
            &stream,
            cred.pid(),
            &service.exec_worker_pids(),
            service.instance(),
        );
        let args = SessionArgs {
            service: service.clone(),
            stream,
            uid: cred.uid(),
            pid: cred.pid(),
            peer,
        };
        if let Err(e) = Actor::spawn_linked(None, SessionActor, args, me.get_cell()).await {
            tracing::error!("cannot start a session: {e}");
        }
    }
}
