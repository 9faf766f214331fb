//! The request body a handler reads, and what is left of it read out before the
//! answer goes.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf as _, Bytes};
use http::Request;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// The most of an unread request body [`answer`] reads out before answering.
/// An unauthenticated client chooses the body, so the bound is what a refusal
/// may cost the server; past it the stream is closed after the answer instead.
pub const DRAIN_BYTES: usize = 1 << 20;

/// The longest [`answer`] waits for the rest of a body before it answers anyway.
pub const DRAIN_TIME: Duration = Duration::from_secs(1);

/// A request's body as its handler reads it. [`answer`] keeps a share of it, so
/// a handler that answers without reading it (or all of it) does not end the
/// client's stream before the answer is out.
#[derive(Debug)]
pub struct RequestBody<B = Incoming>(Arc<Mutex<B>>);

fn lock<B>(m: &Mutex<B>) -> MutexGuard<'_, B> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<B: Body<Data = Bytes> + Unpin> Body for RequestBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut *lock(&self.0)).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        lock(&self.0).is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        lock(&self.0).size_hint()
    }
}

/// Runs `handler` on `req`, then reads out what it left of the request body (at
/// most [`DRAIN_BYTES`], for at most [`DRAIN_TIME`]) before returning its answer.
///
/// Every server of this project answers through here, so an early answer (a
/// refusal before the body is read) reaches the client on HTTP/1.1 and HTTP/2
/// alike. A handler that still holds the body when it answers (a task of its own
/// reading it) is left to read it.
pub async fn answer<B, H, F, R>(req: Request<B>, handler: H) -> R
where
    B: Body<Data = Bytes> + Unpin,
    H: FnOnce(Request<RequestBody<B>>) -> F,
    F: Future<Output = R>,
{
    let (parts, body) = req.into_parts();
    let shared = Arc::new(Mutex::new(body));
    let answered = handler(Request::from_parts(parts, RequestBody(Arc::clone(&shared)))).await;
    if Arc::strong_count(&shared) == 1 {
        let _ = tokio::time::timeout(DRAIN_TIME, drain(&shared)).await;
    }
    answered
}

/// Reads `body` to its end or past [`DRAIN_BYTES`], dropping what it reads.
async fn drain<B: Body<Data = Bytes> + Unpin>(body: &Mutex<B>) {
    let mut read = 0usize;
    poll_fn(|cx| {
        let mut body = lock(body);
        loop {
            if body.is_end_stream() {
                return Poll::Ready(());
            }
            match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None | Some(Err(_))) => return Poll::Ready(()),
                Poll::Ready(Some(Ok(frame))) => {
                    read = read.saturating_add(frame.data_ref().map_or(0, |d| d.remaining()));
                    if read > DRAIN_BYTES {
                        return Poll::Ready(());
                    }
                }
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
