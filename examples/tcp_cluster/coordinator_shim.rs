//! Demo only: serves a [`MemoryCoordinator`] to other processes over TCP, one
//! text line per request and per response. A production deployment
//! implements [`Coordinator`] on ZooKeeper, etcd or a Raft group instead;
//! this shim has no replication, no authentication and one thread per
//! connection.
//!
//! Request lines are `method arg ...`; a response line is `ok payload` or
//! `err message`. A `subscribe node` (or `subscribe_all node`) line turns
//! its connection into a stream of event lines. Node lists are comma-separated (`-` when empty),
//! absent values are `-`, and a log state is the eight fields `log replicas
//! leader epoch isr elr version unclean` (`elr`: the eligible leader
//! replicas; `unclean`: the unclean replicas as `node:last_epoch:log_end:line_epoch:epochs:log_start:high_watermark:start_line:acknowledged_end`, see `unclean_to_text`).
//! Cluster and directory ids are 32 hex digits; a node's replica
//! directories are `log:directory` pairs, comma-separated.
//!
//! The file is also compiled into `tests/coordinator/coordinator_shim_conformance.rs`,
//! which runs the coordinator conformance suite through it.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, TrySendError};
use parking_lot::Mutex;

use isrlog::{
    Assignment, CasOutcome, ClusterId, ControllerEpoch, Coordinator, CoordinatorEvent, DirectoryId,
    Error, Incarnation, LeaderEpoch, LogEnd, LogId, LogState, LogUpdate, MemoryCoordinator, NodeId,
    Offset, ProducerId, Result, UncleanReplica,
};

/// Longest a remote call waits for its connection or its answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Events a subscriber buffers before it gets a `Resync` instead.
const EVENTS_MAX: usize = 1024;

fn error(reason: impl std::fmt::Display) -> Error {
    Error::Coordinator {
        reason: format!("coordinator shim: {reason}"),
    }
}

// -- encoding

fn nodes_to_text(nodes: &[NodeId]) -> String {
    if nodes.is_empty() {
        return "-".into();
    }
    let ids: Vec<String> = nodes.iter().map(|n| n.0.to_string()).collect();
    ids.join(",")
}

fn nodes_from_text(text: &str) -> Result<Vec<NodeId>> {
    if text == "-" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|n| n.parse().map(NodeId).map_err(error))
        .collect()
}

/// `node:incarnation` pairs, comma-separated; `-` for none.
fn incarnations_to_text(live: &[(NodeId, Incarnation)]) -> String {
    if live.is_empty() {
        return "-".into();
    }
    let pairs: Vec<String> = live
        .iter()
        .map(|(node, incarnation)| format!("{}:{}", node.0, incarnation.0))
        .collect();
    pairs.join(",")
}

fn incarnations_from_text(text: &str) -> Result<Vec<(NodeId, Incarnation)>> {
    if text == "-" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|pair| {
            let (node, incarnation) = pair
                .split_once(':')
                .ok_or_else(|| error(format!("not node:incarnation: {pair}")))?;
            Ok((
                NodeId(number(Some(node))?),
                Incarnation(number(Some(incarnation))?),
            ))
        })
        .collect()
}

fn number<T: std::str::FromStr>(text: Option<&str>) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    text.ok_or_else(|| error("missing field"))?
        .parse()
        .map_err(error)
}

fn logs_to_text(logs: &[LogId]) -> String {
    if logs.is_empty() {
        return "-".into();
    }
    let ids: Vec<String> = logs.iter().map(|l| l.0.to_string()).collect();
    ids.join(",")
}

fn logs_from_text(text: &str) -> Result<Vec<LogId>> {
    Ok(nodes_from_text(text)?
        .into_iter()
        .map(|n| LogId(n.0))
        .collect())
}

fn directories_to_text(directories: &[(LogId, DirectoryId)]) -> String {
    if directories.is_empty() {
        return "-".into();
    }
    let pairs: Vec<String> = directories
        .iter()
        .map(|(log, dir)| format!("{}:{dir}", log.0))
        .collect();
    pairs.join(",")
}

fn directories_from_text(text: &str) -> Result<Vec<(LogId, DirectoryId)>> {
    if text == "-" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|pair| {
            let (log, dir) = pair
                .split_once(':')
                .ok_or_else(|| error(format!("bad replica directory {pair:?}")))?;
            Ok((LogId(number(Some(log))?), number(Some(dir))?))
        })
        .collect()
}

fn optional_node(text: Option<&str>) -> Result<Option<NodeId>> {
    match text {
        Some("-") => Ok(None),
        other => number(other).map(|n| Some(NodeId(n))),
    }
}

/// `node:last_epoch:log_end:line_epoch:epochs:log_start:high_watermark:start_line:acknowledged_end`,
/// with `-` for a log without batches, line, start line or acknowledged
/// end (an entry an unclean restart wrote, [`UncleanReplica::acknowledged_end`]),
/// epochs as `epoch@start` joined by `;` (`-` for none); or `node:?` for
/// a log end not known yet (never with an acknowledged end, which
/// `LogState::validate_update` refuses). The fields after the log end came
/// later; absent, they read as none and 0.
fn unclean_to_text(replica: &UncleanReplica) -> String {
    let acknowledged = replica
        .acknowledged_end
        .map_or("-".into(), |end| end.0.to_string());
    let Some(end) = &replica.log_end else {
        return format!("{}:?", replica.node.0);
    };
    let epoch = |epoch: Option<LeaderEpoch>| epoch.map_or("-".into(), |e| e.0.to_string());
    let epochs = if end.epochs.is_empty() {
        "-".to_string()
    } else {
        end.epochs
            .iter()
            .map(|(epoch, start)| format!("{}@{}", epoch.0, start.0))
            .collect::<Vec<_>>()
            .join(";")
    };
    format!(
        "{}:{}:{}:{}:{epochs}:{}:{}:{}:{acknowledged}",
        replica.node.0,
        epoch(end.last_epoch),
        end.log_end_offset.0,
        epoch(end.line_epoch),
        end.log_start_offset.0,
        end.high_watermark.0,
        epoch(end.start_line),
    )
}

fn unclean_from_text(text: &str) -> Result<UncleanReplica> {
    let mut parts = text.split(':');
    let node = NodeId(number(parts.next())?);
    let last_epoch = match parts.next() {
        Some("?") => {
            return Ok(UncleanReplica {
                node,
                acknowledged_end: None,
                log_end: None,
            })
        }
        Some("-") => None,
        other => Some(LeaderEpoch(number(other)?)),
    };
    let log_end_offset = Offset(number(parts.next())?);
    // The fields after the log end came later: absent, they read as none.
    let line_epoch = match parts.next() {
        Some("-") | None => None,
        other => Some(LeaderEpoch(number(other)?)),
    };
    let epochs = match parts.next() {
        Some("-") | None => Vec::new(),
        Some(list) => list
            .split(';')
            .map(|entry| {
                let (epoch, start) = entry
                    .split_once('@')
                    .ok_or_else(|| error(format!("bad epoch entry {entry:?}")))?;
                Ok((
                    LeaderEpoch(number(Some(epoch))?),
                    Offset(number(Some(start))?),
                ))
            })
            .collect::<Result<Vec<_>>>()?,
    };
    let log_start_offset = match parts.next() {
        None => Offset::ZERO,
        other => Offset(number(other)?),
    };
    let high_watermark = match parts.next() {
        None => Offset::ZERO,
        other => Offset(number(other)?),
    };
    let start_line = match parts.next() {
        Some("-") | None => None,
        other => Some(LeaderEpoch(number(other)?)),
    };
    let acknowledged_end = match parts.next() {
        Some("-") | None => None,
        other => Some(Offset(number(other)?)),
    };
    if acknowledged_end.is_some_and(|end| end > log_end_offset) {
        return Err(error(format!(
            "acknowledged end {acknowledged_end:?} above the log end {log_end_offset:?} in {text:?}"
        )));
    }
    Ok(UncleanReplica {
        node,
        acknowledged_end,
        log_end: Some(LogEnd {
            last_epoch,
            log_end_offset,
            log_start_offset,
            high_watermark,
            line_epoch,
            epochs,
            start_line,
        }),
    })
}

fn unclean_list_to_text(replicas: &[UncleanReplica]) -> String {
    if replicas.is_empty() {
        return "-".into();
    }
    replicas
        .iter()
        .map(unclean_to_text)
        .collect::<Vec<_>>()
        .join(",")
}

fn unclean_list_from_text(text: &str) -> Result<Vec<UncleanReplica>> {
    if text == "-" {
        return Ok(Vec::new());
    }
    text.split(',').map(unclean_from_text).collect()
}

fn state_to_text(state: &LogState) -> String {
    format!(
        "{} {} {} {} {} {} {} {} {} {}",
        state.log.0,
        nodes_to_text(&state.replicas),
        state.leader.map_or("-".into(), |l| l.0.to_string()),
        state.leader_epoch.0,
        nodes_to_text(&state.in_sync_replicas),
        nodes_to_text(&state.eligible_leader_replicas),
        state.version,
        unclean_list_to_text(&state.unclean_replicas),
        nodes_to_text(&state.adding_replicas),
        nodes_to_text(&state.removing_replicas)
    )
}

/// A reassignment's replicas as `replicas;adding;removing`, or `-` for an
/// update that keeps the replicas.
fn assignment_to_text(assignment: Option<&Assignment>) -> String {
    assignment.map_or("-".into(), |a| {
        format!(
            "{};{};{}",
            nodes_to_text(&a.replicas),
            nodes_to_text(&a.adding_replicas),
            nodes_to_text(&a.removing_replicas)
        )
    })
}

fn assignment_from_text(text: Option<&str>) -> Result<Option<Assignment>> {
    let Some(text) = text.filter(|text| *text != "-") else {
        return Ok(None);
    };
    let mut lists = text.split(';');
    let mut next = |what: &str| -> Result<Vec<NodeId>> {
        nodes_from_text(
            lists
                .next()
                .ok_or_else(|| error(format!("missing {what}")))?,
        )
    };
    Ok(Some(Assignment {
        replicas: next("replicas")?,
        adding_replicas: next("adding replicas")?,
        removing_replicas: next("removing replicas")?,
    }))
}

fn state_from_text<'a>(fields: &mut impl Iterator<Item = &'a str>) -> Result<LogState> {
    Ok(LogState {
        log: LogId(number(fields.next())?),
        replicas: nodes_from_text(fields.next().ok_or_else(|| error("missing replicas"))?)?,
        leader: optional_node(fields.next())?,
        leader_epoch: LeaderEpoch(number(fields.next())?),
        in_sync_replicas: nodes_from_text(fields.next().ok_or_else(|| error("missing isr"))?)?,
        eligible_leader_replicas: nodes_from_text(
            fields.next().ok_or_else(|| error("missing elr"))?,
        )?,
        version: number(fields.next())?,
        unclean_replicas: unclean_list_from_text(fields.next().unwrap_or("-"))?,
        adding_replicas: nodes_from_text(fields.next().unwrap_or("-"))?,
        removing_replicas: nodes_from_text(fields.next().unwrap_or("-"))?,
    })
}

fn event_to_text(event: &CoordinatorEvent) -> String {
    match event {
        CoordinatorEvent::LogChanged(state) => format!("log {}", state_to_text(state)),
        CoordinatorEvent::NodesChanged { live } => format!("nodes {}", nodes_to_text(live)),
        CoordinatorEvent::ControllerChanged { controller, epoch } => format!(
            "controller {} {}",
            controller.map_or("-".into(), |c| c.0.to_string()),
            epoch.0
        ),
        CoordinatorEvent::Resync => "resync".into(),
    }
}

fn event_from_text(line: &str) -> Result<CoordinatorEvent> {
    let mut fields = line.split_whitespace();
    match fields.next() {
        Some("log") => Ok(CoordinatorEvent::LogChanged(state_from_text(&mut fields)?)),
        Some("nodes") => Ok(CoordinatorEvent::NodesChanged {
            live: nodes_from_text(fields.next().unwrap_or("-"))?,
        }),
        Some("controller") => Ok(CoordinatorEvent::ControllerChanged {
            controller: optional_node(fields.next())?,
            epoch: ControllerEpoch(number(fields.next())?),
        }),
        Some("resync") => Ok(CoordinatorEvent::Resync),
        _ => Err(error(format!("bad event line {line:?}"))),
    }
}

/// The error kinds a caller acts on keep their variant across the wire
/// (`UnknownLog`); every other error becomes `Coordinator` with its message.
fn error_to_text(e: &Error) -> String {
    match e {
        Error::UnknownLog(log) => format!("unknown-log {}", log.0),
        Error::Coordinator { reason } => format!("coordinator {}", reason.replace('\n', " ")),
        other => format!("coordinator {}", other.to_string().replace('\n', " ")),
    }
}

fn error_from_text(answer: &str) -> Error {
    let text = answer.strip_prefix("err ").unwrap_or(answer);
    if let Some(log) = text.strip_prefix("unknown-log ") {
        if let Ok(log) = log.parse() {
            return Error::UnknownLog(LogId(log));
        }
    }
    match text.strip_prefix("coordinator ") {
        // Already a coordinator error on the serving side: pass it on as is.
        Some(reason) => Error::Coordinator {
            reason: reason.to_owned(),
        },
        None => error(text),
    }
}

/// The fields of a compare-and-set request after its method (and, for
/// `cas_controller`, the controller and its epoch): `log expected_epoch
/// expected_version leader leader_epoch isr elr unclean_report assignment`
/// (the report `-` or as in `unclean_to_text`, the assignment `-` or
/// `replicas;adding;removing`).
fn cas_to_text(
    log: LogId,
    expected_epoch: LeaderEpoch,
    expected_version: u64,
    update: &LogUpdate,
) -> String {
    format!(
        "{} {} {} {} {} {} {} {} {}",
        log.0,
        expected_epoch.0,
        expected_version,
        update.leader.map_or("-".into(), |l| l.0.to_string()),
        update.leader_epoch.0,
        nodes_to_text(&update.in_sync_replicas),
        nodes_to_text(&update.eligible_leader_replicas),
        update
            .unclean_report
            .as_ref()
            .map_or("-".into(), unclean_to_text),
        assignment_to_text(update.assignment.as_ref())
    )
}

fn cas_from_text<'a>(
    fields: &mut impl Iterator<Item = &'a str>,
) -> Result<(LogId, LeaderEpoch, u64, LogUpdate)> {
    let log = LogId(number(fields.next())?);
    let epoch = LeaderEpoch(number(fields.next())?);
    let version = number(fields.next())?;
    let update = LogUpdate {
        leader: optional_node(fields.next())?,
        leader_epoch: LeaderEpoch(number(fields.next())?),
        in_sync_replicas: nodes_from_text(fields.next().unwrap_or("-"))?,
        eligible_leader_replicas: nodes_from_text(fields.next().unwrap_or("-"))?,
        unclean_report: match fields.next() {
            None | Some("-") => None,
            Some(text) => Some(unclean_from_text(text)?),
        },
        assignment: assignment_from_text(fields.next())?,
    };
    Ok((log, epoch, version, update))
}

fn cas_outcome_to_text(outcome: &CasOutcome) -> String {
    match outcome {
        CasOutcome::Applied(state) => format!("applied {}", state_to_text(state)),
        CasOutcome::Stale(state) => format!("stale {}", state_to_text(state)),
    }
}

fn cas_outcome_from_text(answer: &str) -> Result<CasOutcome> {
    let mut fields = answer.split_whitespace();
    match fields.next() {
        Some("applied") => Ok(CasOutcome::Applied(state_from_text(&mut fields)?)),
        Some("stale") => Ok(CasOutcome::Stale(state_from_text(&mut fields)?)),
        _ => Err(error(format!("bad compare-and-set answer {answer:?}"))),
    }
}

// -- server

/// Serves `coordinator` on `addr` from a detached thread (the demo's
/// process lifetime bounds it) and returns the bound address.
pub fn serve(coordinator: MemoryCoordinator, addr: SocketAddr) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr).map_err(error)?;
    let local = listener.local_addr().map_err(error)?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let coordinator = coordinator.clone();
            std::thread::spawn(move || {
                if let Err(e) = serve_connection(&coordinator, stream) {
                    tracing::debug!(error = %e, "coordinator shim: connection ended");
                }
            });
        }
    });
    Ok(local)
}

/// Writes `line` and its newline with one `write_all`: written piecewise,
/// Nagle's algorithm and delayed acknowledgements would hold every answer
/// back for tens of milliseconds.
fn write_line(writer: &mut TcpStream, line: &str) -> Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    writer.write_all(&bytes).map_err(error)
}

fn serve_connection(coordinator: &MemoryCoordinator, stream: TcpStream) -> Result<()> {
    stream.set_nodelay(true).map_err(error)?;
    let mut writer = stream.try_clone().map_err(error)?;
    for line in BufReader::new(stream).lines() {
        let line = line.map_err(error)?;
        let subscription = match line.split_once(' ') {
            Some(("subscribe", node)) => Some((node, false)),
            Some(("subscribe_all", node)) => Some((node, true)),
            _ => None,
        };
        if let Some((node, every_log)) = subscription {
            let node = NodeId(number(Some(node))?);
            let subscribed = if every_log {
                coordinator.subscribe_all(node)
            } else {
                coordinator.subscribe(node)
            };
            let events = match subscribed {
                Ok(events) => events,
                Err(e) => {
                    write_line(&mut writer, &format!("err {}", error_to_text(&e)))?;
                    continue;
                }
            };
            write_line(&mut writer, "ok")?;
            return stream_events(&events, &mut writer);
        }
        let answer = match answer(coordinator, &line) {
            Ok(payload) => format!("ok {payload}"),
            Err(e) => format!("err {}", error_to_text(&e)),
        };
        write_line(&mut writer, &answer)?;
    }
    Ok(())
}

/// Forwards events until the subscriber's socket or the coordinator goes.
fn stream_events(events: &Receiver<CoordinatorEvent>, writer: &mut TcpStream) -> Result<()> {
    loop {
        match events.recv_timeout(Duration::from_secs(1)) {
            Ok(event) => write_line(writer, &event_to_text(&event))?,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

fn answer(c: &MemoryCoordinator, line: &str) -> Result<String> {
    let mut f = line.split_whitespace();
    let node = |text: Option<&str>| number(text).map(NodeId);
    Ok(match f.next() {
        Some("create_log") => {
            let log = LogId(number(f.next())?);
            let replicas = nodes_from_text(f.next().unwrap_or("-"))?;
            state_to_text(&c.create_log(log, replicas)?)
        }
        Some("log_state") => match c.log_state(LogId(number(f.next())?))? {
            Some(state) => state_to_text(&state),
            None => "-".into(),
        },
        Some("logs") => {
            let states: Vec<String> = c.logs()?.iter().map(state_to_text).collect();
            states.join(" ")
        }
        Some("cas") => {
            let (log, epoch, version, update) = cas_from_text(&mut f)?;
            cas_outcome_to_text(&c.compare_and_set(log, epoch, version, update)?)
        }
        Some("cas_controller") => {
            let controller = node(f.next())?;
            let controller_epoch = ControllerEpoch(number(f.next())?);
            let (log, epoch, version, update) = cas_from_text(&mut f)?;
            cas_outcome_to_text(&c.compare_and_set_as_controller(
                controller,
                controller_epoch,
                log,
                epoch,
                version,
                update,
            )?)
        }
        Some("register") => {
            let id = node(f.next())?;
            c.register_node(id, Duration::from_millis(number(f.next())?))?
                .0
                .to_string()
        }
        Some("heartbeat") => {
            c.heartbeat(node(f.next())?)?;
            String::new()
        }
        Some("unregister") => {
            c.unregister_node(node(f.next())?)?;
            String::new()
        }
        Some("live") => nodes_to_text(&c.live_nodes()?),
        Some("incarnations") => incarnations_to_text(&c.live_node_incarnations()?),
        Some("try_controller") => match c.try_become_controller(node(f.next())?)? {
            Some(epoch) => epoch.0.to_string(),
            None => "-".into(),
        },
        Some("resign") => {
            c.resign_controller(node(f.next())?)?;
            String::new()
        }
        Some("controller") => match c.controller()? {
            Some((id, epoch)) => format!("{} {}", id.0, epoch.0),
            None => "-".into(),
        },
        Some("producer_id") => c.allocate_producer_id()?.0.to_string(),
        Some("cluster_id") => c.cluster_id()?.to_string(),
        Some("replica_directories") => {
            directories_to_text(&c.replica_directories(node(f.next())?)?)
        }
        Some("record_directories") => {
            let id = node(f.next())?;
            let directory: DirectoryId = number(f.next())?;
            let logs = logs_from_text(f.next().unwrap_or("-"))?;
            c.record_replica_directories(id, directory, &logs)?;
            String::new()
        }
        _ => return Err(error(format!("unknown request {line:?}"))),
    })
}

// -- client

/// A [`Coordinator`] that forwards every call to [`serve`] in another
/// process. Calls share one connection, one at a time; any failure
/// drops it (so a late answer can never be read as the next call's) and
/// the next call dials again.
pub struct RemoteCoordinator {
    addr: SocketAddr,
    connection: Mutex<Option<(TcpStream, BufReader<TcpStream>)>>,
    /// The subscription sockets, shut on drop so their reader threads end.
    subscriptions: Mutex<Vec<TcpStream>>,
}

impl RemoteCoordinator {
    /// A client of the shim at `addr`; connects on first use.
    pub fn new(addr: SocketAddr) -> RemoteCoordinator {
        RemoteCoordinator {
            addr,
            connection: Mutex::new(None),
            subscriptions: Mutex::new(Vec::new()),
        }
    }

    fn dial(&self) -> Result<(TcpStream, BufReader<TcpStream>)> {
        let stream = TcpStream::connect_timeout(&self.addr, CALL_TIMEOUT).map_err(error)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(error)?;
        stream
            .set_write_timeout(Some(CALL_TIMEOUT))
            .map_err(error)?;
        stream.set_nodelay(true).map_err(error)?;
        let reader = BufReader::new(stream.try_clone().map_err(error)?);
        Ok((stream, reader))
    }

    /// Sends one request line; returns the payload of an `ok` answer.
    fn call(&self, request: String) -> Result<String> {
        let mut connection = self.connection.lock();
        if connection.is_none() {
            *connection = Some(self.dial()?);
        }
        let outcome = match connection.as_mut() {
            Some((writer, reader)) => exchange(writer, reader, &request),
            None => Err(error("not connected")),
        };
        match outcome {
            Ok(answer) => match answer.strip_prefix("ok") {
                Some(payload) => Ok(payload.trim_start().to_owned()),
                None => Err(error_from_text(&answer)),
            },
            Err(e) => {
                *connection = None;
                Err(e)
            }
        }
    }
}

fn exchange(
    writer: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    request: &str,
) -> Result<String> {
    write_line(writer, request)?;
    let mut answer = String::new();
    if reader.read_line(&mut answer).map_err(error)? == 0 {
        return Err(error("connection closed"));
    }
    Ok(answer.trim_end().to_owned())
}

impl Drop for RemoteCoordinator {
    fn drop(&mut self) {
        for stream in self.subscriptions.lock().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Coordinator for RemoteCoordinator {
    fn create_log(&self, log: LogId, replicas: Vec<NodeId>) -> Result<LogState> {
        let answer = self.call(format!("create_log {} {}", log.0, nodes_to_text(&replicas)))?;
        state_from_text(&mut answer.split_whitespace())
    }

    fn log_state(&self, log: LogId) -> Result<Option<LogState>> {
        let answer = self.call(format!("log_state {}", log.0))?;
        if answer == "-" {
            return Ok(None);
        }
        state_from_text(&mut answer.split_whitespace()).map(Some)
    }

    fn logs(&self) -> Result<Vec<LogState>> {
        let answer = self.call("logs".into())?;
        let mut fields = answer.split_whitespace().peekable();
        let mut states = Vec::new();
        while fields.peek().is_some() {
            states.push(state_from_text(&mut fields)?);
        }
        Ok(states)
    }

    fn compare_and_set(
        &self,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        let answer = self.call(format!(
            "cas {}",
            cas_to_text(log, expected_epoch, expected_version, &update)
        ))?;
        cas_outcome_from_text(&answer)
    }

    fn compare_and_set_as_controller(
        &self,
        controller: NodeId,
        controller_epoch: ControllerEpoch,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome> {
        let answer = self.call(format!(
            "cas_controller {} {} {}",
            controller.0,
            controller_epoch.0,
            cas_to_text(log, expected_epoch, expected_version, &update)
        ))?;
        cas_outcome_from_text(&answer)
    }

    fn register_node(&self, node: NodeId, session_timeout: Duration) -> Result<Incarnation> {
        let answer = self.call(format!(
            "register {} {}",
            node.0,
            session_timeout.as_millis()
        ))?;
        number(Some(&answer)).map(Incarnation)
    }

    fn heartbeat(&self, node: NodeId) -> Result<()> {
        self.call(format!("heartbeat {}", node.0)).map(drop)
    }

    fn unregister_node(&self, node: NodeId) -> Result<()> {
        self.call(format!("unregister {}", node.0)).map(drop)
    }

    fn live_nodes(&self) -> Result<Vec<NodeId>> {
        nodes_from_text(&self.call("live".into())?)
    }

    fn live_node_incarnations(&self) -> Result<Vec<(NodeId, Incarnation)>> {
        incarnations_from_text(&self.call("incarnations".into())?)
    }

    fn subscribe(&self, node: NodeId) -> Result<Receiver<CoordinatorEvent>> {
        self.open_subscription(format!("subscribe {}", node.0))
    }

    fn subscribe_all(&self, node: NodeId) -> Result<Receiver<CoordinatorEvent>> {
        self.open_subscription(format!("subscribe_all {}", node.0))
    }

    fn try_become_controller(&self, node: NodeId) -> Result<Option<ControllerEpoch>> {
        let answer = self.call(format!("try_controller {}", node.0))?;
        match answer.as_str() {
            "-" => Ok(None),
            epoch => number(Some(epoch)).map(|e| Some(ControllerEpoch(e))),
        }
    }

    fn resign_controller(&self, node: NodeId) -> Result<()> {
        self.call(format!("resign {}", node.0)).map(drop)
    }

    fn controller(&self) -> Result<Option<(NodeId, ControllerEpoch)>> {
        let answer = self.call("controller".into())?;
        if answer == "-" {
            return Ok(None);
        }
        let mut fields = answer.split_whitespace();
        Ok(Some((
            NodeId(number(fields.next())?),
            ControllerEpoch(number(fields.next())?),
        )))
    }

    fn allocate_producer_id(&self) -> Result<ProducerId> {
        number(Some(&self.call("producer_id".into())?)).map(ProducerId)
    }

    fn cluster_id(&self) -> Result<ClusterId> {
        number(Some(&self.call("cluster_id".into())?))
    }

    fn replica_directories(&self, node: NodeId) -> Result<Vec<(LogId, DirectoryId)>> {
        directories_from_text(&self.call(format!("replica_directories {}", node.0))?)
    }

    fn record_replica_directories(
        &self,
        node: NodeId,
        directory: DirectoryId,
        logs: &[LogId],
    ) -> Result<()> {
        self.call(format!(
            "record_directories {} {directory} {}",
            node.0,
            logs_to_text(logs)
        ))?;
        Ok(())
    }
}

impl RemoteCoordinator {
    /// Dials a connection of its own, sends `request` (a `subscribe` or
    /// `subscribe_all` line) and forwards the event lines that follow into
    /// a bounded queue.
    fn open_subscription(&self, request: String) -> Result<Receiver<CoordinatorEvent>> {
        let (mut writer, mut reader) = self.dial()?;
        let answer = exchange(&mut writer, &mut reader, &request)?;
        if answer != "ok" {
            return Err(error(answer));
        }
        // Events come when they come: no read timeout on this socket.
        // The thread ends when the socket is shut (drop) or the
        // receiver is dropped.
        writer.set_read_timeout(None).map_err(error)?;
        self.subscriptions.lock().push(writer);
        let (sender, receiver) = bounded(EVENTS_MAX);
        std::thread::spawn(move || {
            let mut missed = false;
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let event = match event_from_text(&line) {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::warn!(error = %e, "coordinator shim: dropping a bad event");
                        missed = true;
                        continue;
                    }
                };
                // A full queue loses events; the receiver is told to
                // re-read everything, as the trait allows.
                if missed {
                    match sender.try_send(CoordinatorEvent::Resync) {
                        Ok(()) => missed = false,
                        Err(TrySendError::Full(_)) => continue,
                        Err(TrySendError::Disconnected(_)) => return,
                    }
                }
                match sender.try_send(event) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => missed = true,
                    Err(TrySendError::Disconnected(_)) => return,
                }
            }
        });
        Ok(receiver)
    }
}
