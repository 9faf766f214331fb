use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

use super::*;

/// A body fed by the test a chunk at a time, counting what was read of it.
struct Fed {
    chunks: mpsc::Receiver<Bytes>,
    read: Arc<AtomicUsize>,
    ended: bool,
}

impl Body for Fed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.chunks.poll_recv(cx) {
            Poll::Ready(Some(b)) => {
                self.read.fetch_add(b.len(), Ordering::SeqCst);
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

fn fed() -> (mpsc::Sender<Bytes>, Request<Fed>, Arc<AtomicUsize>) {
    let (tx, chunks) = mpsc::channel(4);
    let read = Arc::new(AtomicUsize::new(0));
    (tx, Request::new(Fed { chunks, read: Arc::clone(&read), ended: false }), read)
}

#[tokio::test]
async fn an_answer_before_the_body_waits_for_the_rest_of_it() {
    let (tx, req, read) = fed();
    let sender = tokio::spawn(async move {
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send(Bytes::from_static(b"0123456789")).await.expect("sent");
        }
    });
    let answered = answer(req, |_req| async { 401 }).await;
    assert_eq!(answered, 401);
    assert_eq!(read.load(Ordering::SeqCst), 30, "the whole body was read before the answer");
    sender.await.expect("the sender");
}

#[tokio::test]
async fn a_body_the_handler_read_is_not_waited_on_again() {
    let (tx, req, read) = fed();
    tx.send(Bytes::from_static(b"abc")).await.expect("sent");
    drop(tx);
    let got = answer(req, |req| async move {
        use http_body_util::BodyExt as _;
        req.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default()
    })
    .await;
    assert_eq!((got.as_ref(), read.load(Ordering::SeqCst)), (&b"abc"[..], 3));
}

#[tokio::test]
async fn reading_out_stops_past_the_bound() {
    let (tx, req, read) = fed();
    // The client would send far more than the bound; reading stops just past it.
    let sender = tokio::spawn(async move {
        let chunk = Bytes::from(vec![b'x'; 64 << 10]);
        for _ in 0..64 {
            if tx.send(chunk.clone()).await.is_err() {
                return;
            }
        }
    });
    assert_eq!(answer(req, |_req| async { "refused" }).await, "refused");
    let n = read.load(Ordering::SeqCst);
    assert!(n > DRAIN_BYTES && n <= DRAIN_BYTES + (64 << 10), "read {n} bytes");
    sender.abort();
}

#[tokio::test]
async fn a_stalled_body_is_given_up_after_the_drain_time() {
    let (tx, req, read) = fed();
    tx.send(Bytes::from_static(b"part")).await.expect("sent");
    // `tx` stays alive and silent: the body never ends.
    let started = std::time::Instant::now();
    assert_eq!(answer(req, |_req| async { 413 }).await, 413);
    assert!(started.elapsed() >= DRAIN_TIME, "answered after {:?}", started.elapsed());
    assert_eq!(read.load(Ordering::SeqCst), 4);
    drop(tx);
}

#[tokio::test]
async fn a_body_the_handler_still_holds_is_left_to_it() {
    let (tx, req, read) = fed();
    let (keep_tx, keep_rx) = tokio::sync::oneshot::channel();
    let answered = answer(req, |req| async move {
        let _ = keep_tx.send(req.into_body());
        200
    })
    .await;
    assert_eq!(answered, 200);
    let body = keep_rx.await.expect("kept");
    tx.send(Bytes::from_static(b"later")).await.expect("sent");
    assert_eq!(read.load(Ordering::SeqCst), 0, "nothing was read behind the holder's back");
    drop((body, tx));
}
