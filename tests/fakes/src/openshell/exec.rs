//! ExecSandbox: the request's checks, then the process's output streamed as
//! it comes and one exit event, as the gateway relays an exec.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::grpc::{self, Code, Sink, Status};
use super::proto::{
    ExecPayload, ExecSandboxEvent, ExecSandboxExit, ExecSandboxRequest, ExecSandboxStderr, ExecSandboxStdout,
    SandboxPhase,
};
use super::{Fake, Mode, docker, lock, validate};
use crate::backing::{Chunk, Process};
use crate::server::Body;

/// The exit code the gateway reports when an exec's timeout passes.
const TIMED_OUT: i32 = 124;

impl Fake {
    /// ExecSandbox: checks, then a stream of the process's output and exit.
    pub(super) fn exec(self: Arc<Self>, body: &[u8]) -> http::Response<Body> {
        let req: ExecSandboxRequest = match grpc::request(body).and_then(|r| validate::exec(&r).map(|()| r)) {
            Ok(r) => r,
            Err(e) => return grpc::trailers_only(&e),
        };
        let ready = match lock(&self.sandboxes).get(&req.sandbox_id) {
            None => return grpc::trailers_only(&Status::not_found("sandbox not found")),
            Some(r) => self.view(r).status.is_some_and(|s| s.phase == SandboxPhase::Ready as i32),
        };
        if !ready {
            return grpc::trailers_only(&Status::failed_precondition("sandbox is not ready"));
        }
        let (response, sink) = grpc::streaming();
        tokio::spawn(async move { self.run_exec(req, sink).await });
        response
    }

    async fn run_exec(self: Arc<Self>, req: ExecSandboxRequest, sink: Sink) {
        let id = req.sandbox_id.clone();
        // As the gateway's shell line does: into the workdir if one is asked,
        // then the argv, each argument as given.
        let script = "[ -z \"$1\" ] || cd -- \"$1\" || exit 1; shift; exec \"$@\"";
        let mut argv = vec!["sh".into(), "-c".into(), script.into(), "sh".into(), req.workdir.clone()];
        argv.extend(req.command.iter().cloned());
        let marker = format!("{id}-exec-{}", self.execs.fetch_add(1, Ordering::Relaxed));
        let process = Process {
            argv,
            cwd: docker::WORKSPACE.into(),
            env: req.environment.clone().into_iter().collect(),
            stdin: Some(Bytes::from(req.stdin.clone())),
            marker: Some(marker.clone()),
            ..Process::default()
        };
        let (tx, rx) = mpsc::channel(16);
        let me = Arc::clone(&self);
        let run_id = id.clone();
        let run = tokio::spawn(async move { me.backing.run(&run_id, process, tx).await });
        let timeout = (req.timeout_seconds > 0).then(|| Duration::from_secs(u64::from(req.timeout_seconds)));
        let ended = forward(rx, &sink, timeout, req.tty, self.mode == Some(Mode::Truncated)).await;
        match ended {
            Ended::Gone => {
                // The client cancelled: this exec's processes go too (the
                // gateway kills the command's process group), not the others.
                run.abort();
                self.backing.kill_marked(&id, &marker).await;
            }
            Ended::Exited | Ended::TimedOut => {}
            Ended::NoExit => {
                let why = match run.await {
                    Ok(Err(e)) => format!("exec failed: {e}"),
                    _ => "exec ended without an exit status".into(),
                };
                sink.finish(Status::new(Code::Unavailable, why)).await;
            }
        }
    }
}

/// How an exec's stream ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The process exited: its exit event (unless `truncated`), then OK.
    Exited,
    /// The timeout passed: exit 124, then OK, the process left running.
    TimedOut,
    /// The client went away.
    Gone,
    /// The output ended without an exit status (the stream is left open).
    NoExit,
}

fn event(payload: ExecPayload) -> ExecSandboxEvent {
    ExecSandboxEvent { payload: Some(payload) }
}

/// Forwards a process's output from `rx` to `sink` as exec events as it comes,
/// then its exit, as the gateway does: with `tty` there is no separate stderr,
/// and `truncated` leaves the exit event out.
async fn forward(
    mut rx: mpsc::Receiver<Chunk>,
    sink: &Sink,
    timeout: Option<Duration>,
    tty: bool,
    truncated: bool,
) -> Ended {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let exit = |code: i32| event(ExecPayload::Exit(ExecSandboxExit { exit_code: code }));
    loop {
        let chunk = tokio::select! {
            c = rx.recv() => c,
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                if truncated || sink.send(&exit(TIMED_OUT)).await {
                    sink.finish(Status::ok()).await;
                    return Ended::TimedOut;
                }
                return Ended::Gone;
            }
            () = sink.gone() => return Ended::Gone,
        };
        let e = match chunk {
            None => return Ended::NoExit,
            Some(Chunk::Stdout(b)) => event(ExecPayload::Stdout(ExecSandboxStdout { data: b.to_vec() })),
            Some(Chunk::Stderr(b)) if tty => event(ExecPayload::Stdout(ExecSandboxStdout { data: b.to_vec() })),
            Some(Chunk::Stderr(b)) => event(ExecPayload::Stderr(ExecSandboxStderr { data: b.to_vec() })),
            Some(Chunk::Exit(None)) => return Ended::NoExit,
            Some(Chunk::Exit(Some(code))) => {
                if truncated || sink.send(&exit(code)).await {
                    sink.finish(Status::ok()).await;
                    return Ended::Exited;
                }
                return Ended::Gone;
            }
        };
        if !sink.send(&e).await {
            return Ended::Gone;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;
    use prost::Message as _;

    /// The answer's status and its message bytes.
    async fn answer(r: http::Response<Body>) -> (String, Vec<Bytes>) {
        let body = r.into_body().collect().await.expect("body");
        let status = body.trailers().and_then(|t| t.get("grpc-status")).and_then(|v| v.to_str().ok());
        let status = status.unwrap_or_default().to_string();
        (status, grpc::unframe(&body.to_bytes()).expect("frames"))
    }

    /// Runs `forward` over `chunks` and gives back the events and the status.
    async fn forwarded(
        chunks: Vec<Chunk>,
        timeout: Option<Duration>,
        tty: bool,
        truncated: bool,
    ) -> (Vec<ExecPayload>, String, Ended) {
        let (tx, rx) = mpsc::channel(16);
        let (response, sink) = grpc::streaming();
        let feeder = tokio::spawn(async move {
            for c in chunks {
                let _ = tx.send(c).await;
            }
            // Keep the channel open a while, as a process still running would.
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let ended = forward(rx, &sink, timeout, tty, truncated).await;
        drop(sink);
        feeder.abort();
        let (status, messages) = answer(response).await;
        let events =
            messages.into_iter().filter_map(|m| ExecSandboxEvent::decode(m).ok().and_then(|e| e.payload)).collect();
        (events, status, ended)
    }

    fn out(b: &'static [u8]) -> Chunk {
        Chunk::Stdout(Bytes::from_static(b))
    }

    #[tokio::test]
    async fn exec_streams_output_then_one_exit() {
        let chunks = vec![out(b"a"), Chunk::Stderr(Bytes::from_static(b"e")), out(b"b"), Chunk::Exit(Some(3))];
        let (events, status, ended) = forwarded(chunks, None, false, false).await;
        assert_eq!((status.as_str(), ended), ("0", Ended::Exited));
        assert_eq!(
            events,
            vec![
                ExecPayload::Stdout(ExecSandboxStdout { data: b"a".to_vec() }),
                ExecPayload::Stderr(ExecSandboxStderr { data: b"e".to_vec() }),
                ExecPayload::Stdout(ExecSandboxStdout { data: b"b".to_vec() }),
                ExecPayload::Exit(ExecSandboxExit { exit_code: 3 }),
            ]
        );
        let chunks = vec![Chunk::Stderr(Bytes::from_static(b"e")), Chunk::Exit(Some(0))];
        let (events, _, _) = forwarded(chunks, None, true, false).await;
        assert_eq!(events[0], ExecPayload::Stdout(ExecSandboxStdout { data: b"e".to_vec() }));
    }

    #[tokio::test]
    async fn truncated_sends_no_exit_event_but_ok() {
        let (events, status, _) = forwarded(vec![out(b"a"), Chunk::Exit(Some(0))], None, false, true).await;
        assert_eq!(status, "0");
        assert_eq!(events, vec![ExecPayload::Stdout(ExecSandboxStdout { data: b"a".to_vec() })]);
    }

    #[tokio::test]
    async fn a_timeout_exits_124_with_ok() {
        let (events, status, ended) = forwarded(vec![out(b"a")], Some(Duration::from_millis(100)), false, false).await;
        assert_eq!((status.as_str(), ended), ("0", Ended::TimedOut));
        assert_eq!(events.last(), Some(&ExecPayload::Exit(ExecSandboxExit { exit_code: 124 })));
    }

    #[tokio::test]
    async fn a_client_that_goes_away_ends_the_forwarding() {
        let (tx, rx) = mpsc::channel(16);
        let (response, sink) = grpc::streaming();
        drop(response);
        let _keep = tx.clone();
        let ended = tokio::time::timeout(Duration::from_secs(2), forward(rx, &sink, None, false, false)).await;
        assert_eq!(ended.ok(), Some(Ended::Gone));
    }
}
