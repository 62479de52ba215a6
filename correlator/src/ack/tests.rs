use super::*;

fn open(id: &str) -> CandidateUpdate {
    CandidateUpdate {
        incident_id: id.into(),
        state: "opened".into(),
        ..Default::default()
    }
}

fn req(by: &str, why: &str, for_s: u64) -> AckRequest {
    AckRequest {
        by: by.into(),
        why: why.into(),
        for_s,
    }
}

#[test]
fn requests_are_checked_before_anything_is_set() {
    assert_eq!(req("", "x", 0).ack("i", 0), Err(AckError::BadBy));
    assert_eq!(req("   ", "x", 0).ack("i", 0), Err(AckError::BadBy));
    assert_eq!(
        req("al\nice", "x", 0).ack("i", 0),
        Err(AckError::Unprintable {
            field: "by",
            at: 3,
            code: 0x0A
        })
    );
    assert_eq!(
        req(&"a".repeat(65), "x", 0).ack("i", 0),
        Err(AckError::BadBy)
    );
    assert_eq!(req("alice", "", 0).ack("i", 0), Err(AckError::BadWhy));
    // Text-direction overrides and isolates, zero-width and other
    // control characters: "fixed \u{202E}kcab" reads "fixed back" reversed.
    for (why, at, code) in [
        ("fixed \u{202E}kcab", 7, 0x202E),
        ("\u{2066}x", 1, 0x2066),
        ("a\u{2069}", 2, 0x2069),
        ("a\u{202A}b", 2, 0x202A),
        ("a\u{200F}b", 2, 0x200F),
        ("a\u{200B}b", 2, 0x200B),
        ("a\u{1b}[31mb", 2, 0x1B),
        ("a\u{85}b", 2, 0x85),
        ("a\u{2028}b", 2, 0x2028),
    ] {
        let e = req("alice", why, 0).ack("i", 0).expect_err(why);
        assert_eq!(
            e,
            AckError::Unprintable {
                field: "why",
                at,
                code
            },
            "{why:?}"
        );
    }
    assert!(AckError::Unprintable { field: "why", at: 7, code: 0x202E }
        .to_string()
        .starts_with("`why` has U+202E at character 7: control, invisible and text-direction characters are refused"));
    // Other scripts, right-to-left ones too, stay welcome.
    assert!(req("alice", "כבל חדש ביום שלישי — cable 3", 0)
        .ack("i", 0)
        .is_ok());
    assert_eq!(check_why("", false), Ok(()));
    assert_eq!(
        check_why("\u{202E}", false),
        Err(AckError::Unprintable {
            field: "why",
            at: 1,
            code: 0x202E
        })
    );
    assert_eq!(req("alice", "x", 59).ack("i", 0), Err(AckError::BadFor));
    assert_eq!(
        req("alice", "x", 31 * 86_400).ack("i", 0),
        Err(AckError::BadFor)
    );
    let a = req(" alice ", "new cable Tuesday", 3600)
        .ack("i", 1_000)
        .expect("valid");
    assert_eq!(a.by, "alice");
    assert_eq!(a.until_ms, Some(3_601_000));
    assert!(a.holds(3_600_999) && !a.holds(3_601_000));
    assert_eq!(
        req("alice", "x", 0).ack("i", 5).map(|a| a.until_ms),
        Ok(None)
    );
}

#[test]
fn the_token_is_required_and_compared_whole() {
    assert_eq!(
        Acks::new(None).authorize(Some("Bearer x")),
        Err(AckError::Off)
    );
    assert_eq!(
        Acks::new(Some("  \n".into())).authorize(Some("Bearer ")),
        Err(AckError::Off)
    );
    let acks = Acks::new(Some("s3cret\n".into()));
    assert_eq!(acks.authorize(Some("Bearer s3cret")), Ok(()));
    for wrong in [
        None,
        Some("s3cret"),
        Some("Bearer s3cre"),
        Some("Bearer s3cret2"),
        Some("Basic s3cret"),
    ] {
        assert_eq!(
            acks.authorize(wrong),
            Err(AckError::Unauthorized),
            "{wrong:?}"
        );
    }
}

#[test]
fn only_open_incidents_are_acknowledged_and_expiry_clears_with_an_event() {
    let acks = Acks::new(Some("t".into()));
    let mut events = acks.subscribe();
    let a = req("alice", "why", 60).ack("inc-1", 0).expect("valid");
    assert_eq!(
        acks.set(a.clone(), &[open("inc-2")]),
        Err(AckError::NotOpen("inc-1".into()))
    );
    acks.set(a.clone(), &[open("inc-1")]).expect("set");
    assert_eq!(events.try_recv().ok(), Some(AckEvent::Set(a.clone())));
    assert_eq!(acks.get("inc-1", 59_999), Some(a.clone()));
    assert_eq!(acks.current(59_999), vec![a]);
    // Its minute is up: gone, with an event naming no operator.
    assert!(acks.current(60_000).is_empty());
    assert_eq!(
        events.try_recv().ok(),
        Some(AckEvent::Cleared {
            incident_id: "inc-1".into(),
            by: String::new(),
            ts_ms: 60_000
        })
    );
    assert_eq!(
        acks.clear("inc-1", "bob", 61_000),
        Err(AckError::NotAcked("inc-1".into()))
    );
}

#[test]
fn restore_keeps_only_what_still_holds() {
    let acks = Acks::new(Some("t".into()));
    let mk = |id: &str, until: Option<i64>| Ack {
        incident_id: id.into(),
        by: "alice".into(),
        why: "w".into(),
        ts_ms: 0,
        until_ms: until,
    };
    let n = acks.restore(
        [
            mk("forever", None),
            mk("expired", Some(10)),
            mk("later", Some(500)),
        ],
        100,
    );
    assert_eq!(n, 2);
    let ids: Vec<String> = acks
        .current(100)
        .into_iter()
        .map(|a| a.incident_id)
        .collect();
    assert_eq!(ids, ["forever", "later"]);
    // The engine's open list no longer has "later": it ends.
    acks.prune(&[open("forever")], 200);
    let ids: Vec<String> = acks
        .current(200)
        .into_iter()
        .map(|a| a.incident_id)
        .collect();
    assert_eq!(ids, ["forever"]);
}

/// `faultline-correlator ack` refuses the same text before sending anything
/// (the token file and the server are never reached).
#[tokio::test]
async fn the_cli_refuses_a_direction_override_before_any_request() {
    let args = |why: &str, clear: bool| cli::AckArgs {
        id: "i".into(),
        web: "http://127.0.0.1:9".into(),
        token_file: "/nonexistent/token".into(),
        by: "alice".into(),
        why: why.into(),
        for_: None,
        clear,
    };
    for clear in [false, true] {
        let e = cli::run(&args("fixed \u{202E}kcab", clear))
            .await
            .expect_err("refused");
        assert!(
            matches!(
                e,
                cli::AckCliError::Invalid(AckError::Unprintable {
                    field: "why",
                    at: 7,
                    code: 0x202E
                })
            ),
            "{e}"
        );
        assert!(
            e.to_string().starts_with("--by/--why: `why` has U+202E"),
            "{e}"
        );
    }
    // A clean reason gets as far as the token file.
    let e = cli::run(&args("new cable", false))
        .await
        .expect_err("no token");
    assert!(matches!(e, cli::AckCliError::Token { .. }), "{e}");
}
