//! Requests and streams mark their connection busy until the response
//! ends: a tower layer for tonic, and the response body that holds the mark.
use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use super::table::Listener;

/// A tower layer for a tonic server fed by [`incoming`](super::incoming): every request
/// (stream) it sees marks its connection busy until the response ends. Put
/// it inside the authentication layer (a later `Server::layer` call), so
/// that refused calls do not keep a connection alive.
#[derive(Clone, Debug)]
pub struct ActivityLayer(pub Listener);

impl<S> tower_layer::Layer<S> for ActivityLayer {
    type Service = Activity<S>;

    fn layer(&self, inner: S) -> Activity<S> {
        Activity {
            inner,
            listener: self.0.clone(),
        }
    }
}

/// See [`ActivityLayer`].
#[derive(Clone, Debug)]
pub struct Activity<S> {
    inner: S,
    listener: Listener,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower_service::Service<http::Request<B>> for Activity<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    RB::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let e = req.extensions();
        let peer = e
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr)
            .or_else(|| {
                e.get::<TlsConnectInfo<TcpConnectInfo>>()
                    .and_then(|t| t.get_ref().remote_addr())
            });
        let busy = peer.and_then(|p| self.listener.busy(p));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|b| tonic::body::Body::new(hold(b, busy))))
        })
    }
}

/// `body`, holding `guard` until it is dropped (the response ended). The
/// body's size hint is kept, so a response of known length still carries
/// `Content-Length` (not chunked encoding).
pub fn hold<B, G>(body: B, guard: G) -> Hold<B, G>
where
    B: http_body::Body + Send + 'static,
    G: Send + 'static,
{
    Hold {
        body: Box::pin(body),
        _guard: guard,
    }
}

/// See [`hold`].
pub struct Hold<B, G> {
    body: Pin<Box<B>>,
    _guard: G,
}

impl<B: http_body::Body, G: Unpin> http_body::Body for Hold<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.body.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
