//! Every route, exact status / content-type / body, over each protocol.

use hyper::Version;

use super::*;

/// All routes in turn on one connection; a second request on the same h1
/// connection only succeeds if keep-alive held.
async fn check_h1(mut sender: http1::SendRequest<Body>) {
    for (path, status, content_type, body) in expected() {
        sender
            .ready()
            .await
            .expect("h1 connection still open (keep-alive)");
        let got = read(
            sender
                .send_request(get(path, Version::HTTP_11))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(got.version, Version::HTTP_11, "{path}");
        assert_eq!(got.status, status, "{path}");
        assert_eq!(got.content_type, content_type, "{path}");
        assert_eq!(
            got.connection, None,
            "{path}: keep-alive is the h1.1 default"
        );
        assert_eq!(got.body, body, "{path}");
    }
}

/// All routes as concurrent streams on one h2 connection.
async fn check_h2(sender: http2::SendRequest<Body>) {
    let mut streams = Vec::new();
    for (path, status, content_type, body) in expected() {
        let mut sender = sender.clone();
        streams.push(tokio::spawn(async move {
            let got = read(
                sender
                    .send_request(get(path, Version::HTTP_2))
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(got.version, Version::HTTP_2, "{path}");
            assert_eq!(got.status, status, "{path}");
            assert_eq!(got.content_type, content_type, "{path}");
            assert_eq!(got.body, body, "{path}");
        }));
    }
    for stream in streams {
        stream.await.unwrap();
    }
}

#[tokio::test]
async fn serves_every_route_over_h1_keep_alive() {
    let peer = Peer::start(&[]);
    check_h1(h1(tcp(peer.port).await).await).await;
}

#[tokio::test]
async fn serves_every_route_over_h2c_prior_knowledge_on_the_same_port() {
    let peer = Peer::start(&[]);
    check_h2(h2(tcp(peer.port).await).await).await;
    // And h1 still works next to it: the preface, not the port, decides.
    check_h1(h1(tcp(peer.port).await).await).await;
}

#[tokio::test]
async fn serves_every_route_over_h2_on_tls_when_alpn_offers_h2() {
    let peer = Peer::start_tls();
    let tls = tls(peer.port, "localhost", &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    check_h2(h2(tls).await).await;
}

#[tokio::test]
async fn serves_every_route_over_h1_on_tls_when_alpn_offers_only_http_1_1() {
    let peer = Peer::start_tls();
    let tls = tls(peer.port, "localhost", &[b"http/1.1"]).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    check_h1(h1(tls).await).await;
}

#[tokio::test]
async fn serves_every_route_over_h1_on_tls_when_the_client_offers_no_alpn() {
    let peer = Peer::start_tls();
    let tls = tls(peer.port, "localhost", &[]).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), None);
    check_h1(h1(tls).await).await;
}

#[tokio::test]
async fn fixture_certificate_is_rejected_for_a_name_it_does_not_carry() {
    let peer = Peer::start_tls();
    let err = tls(peer.port, "example.com", &[b"h2"]).await.unwrap_err();
    let cause = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert!(
        matches!(
            cause,
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. }
            ))
        ),
        "unexpected error: {err}"
    );
}

#[tokio::test]
async fn answers_404_not_found_for_other_methods_on_known_paths() {
    let peer = Peer::start(&[]);
    let mut sender = h1(tcp(peer.port).await).await;
    let req = hyper::Request::post("/plain")
        .header(hyper::header::HOST, "localhost")
        .body(Body::new())
        .unwrap();
    let got = read(sender.send_request(req).await.unwrap()).await;
    assert_eq!(got.status, 404);
    assert_eq!(got.content_type, "text/plain");
    assert_eq!(got.body, &b"not found"[..]);
}
