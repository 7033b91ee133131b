//! Each group's pool as the service starts it, and the tools its workers announce.

use super::*;

/// What a group's pool runs.
pub(super) fn pool_spec(
    group: &Group,
    paths: &Paths,
    config: &Config,
    init: &WorkerInit,
    spawner: &Spawner,
    events: &Events,
    announce: Option<Announce>,
) -> PoolSpec {
    let gcfg = config.group_settings(&group.name).unwrap_or_default();
    let launch = match group.kind {
        Kind::External { .. } => Some(crate::workers::confine::external(
            &group.name,
            &gcfg,
            init,
            paths.wrap_worker,
        )),
        Kind::Builtin | Kind::Mcp { .. } => None,
    };
    let refused = launch.as_ref().and_then(|l| l.refused.clone());
    PoolSpec {
        group: group.name.clone(),
        count: config.workers.count(&group.name),
        queue_max: gcfg.queue_max,
        max_in_flight: gcfg.max_in_flight,
        spawner: spawner.clone(),
        spawn: SpawnSpec {
            exe: paths.exe.clone(),
            group: group.name.clone(),
            command: launch.map(|l| l.command).or_else(|| group.command()),
            cwd: paths.workspace.clone(),
            passthrough: gcfg.env_passthrough.clone(),
            // A built-in group's `env` is for the commands it runs, not the worker.
            env: match group.kind {
                Kind::External { .. } => gcfg.env.clone(),
                // An MCP server's `env` reaches the server only, through `init.mcp`.
                Kind::Builtin | Kind::Mcp { .. } => Default::default(),
            },
            nice: group.nice(),
            refused,
        },
        init: WorkerInit {
            group: group.name.clone(),
            mcp: group.mcp(),
            ..init.clone()
        },
        policy: RestartPolicy::new(config.supervisor.clone()),
        events: events.clone(),
        deadline_grace: group.patience(),
        announce,
    }
}

/// Whose word an announcement is: an external group's (its tools, at least the
/// group's risk), a built-in group's (templates it fills), or an MCP server's worker's
/// (its server's tools, at the server's configured risk: [`crate::registry::mcp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    External(Risk),
    Builtin,
    Mcp,
}

/// How long `serve` waits for a built-in group's first announcement.
pub(super) const FIRST_ANNOUNCEMENT: std::time::Duration = std::time::Duration::from_secs(10);

/// Take `group`'s first announcement once it comes, or go on without it after
/// [`FIRST_ANNOUNCEMENT`] (its tools join when its worker is up).
pub(super) async fn first_announcement(
    service: &Service,
    group: &str,
    rx: &mut watch::Receiver<Option<Vec<AnnouncedTool>>>,
) {
    let first = tokio::time::timeout(FIRST_ANNOUNCEMENT, rx.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(|r| r.ok().map(|tools| tools.clone()));
    match first {
        Some(tools) => service.take_announcement(group, Source::Builtin, tools.unwrap_or_default()),
        None => tracing::warn!(
            group,
            "the worker did not say which tools it has within {FIRST_ANNOUNCEMENT:?}; they join once it does"
        ),
    }
}

/// Apply a group's announcements, the newest first, for as long as the service lives.
pub(super) async fn follow_announcements(
    service: std::sync::Weak<Service>,
    group: String,
    source: Source,
    mut rx: watch::Receiver<Option<Vec<AnnouncedTool>>>,
) {
    loop {
        let tools = rx.borrow_and_update().clone();
        if let (Some(tools), Some(s)) = (tools, service.upgrade()) {
            s.take_announcement(&group, source, tools);
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}
