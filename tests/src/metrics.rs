//! A Prometheus `/metrics` endpoint, scraped and read: [`scrape`] fetches
//! the text, [`value`] finds one sample in it by name and labels, and
//! [`counter`] does both for a counter.
use std::{
    io::{self, Read as _, Write as _},
    net::TcpStream,
    time::Duration,
};

/// The body of `GET /metrics` at `addr` (`host:port`). HTTP/1.0, so the
/// response is never chunked and ends with the connection.
pub fn scrape(addr: &str) -> io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    // One write: a server that answers after the request line and closes
    // must not find the rest of the request unread (a reset).
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(io::Error::other(format!(
            "GET /metrics at {addr}: not an HTTP response: {text:?}"
        )));
    };
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(io::Error::other(format!(
            "GET /metrics at {addr}: {status}"
        )));
    }
    Ok(body.to_string())
}

/// The value of counter `name{labels}` at `addr`; 0 when the page has no
/// such sample (a counter never incremented is not exported). Panics when
/// the endpoint does not answer.
pub fn counter(addr: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    let text = scrape(addr).unwrap_or_else(|e| panic!("scraping {addr}: {e}"));
    value(&text, name, labels).map_or(0, |v| v as u64)
}

/// One sample line of a text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    /// As written, values unescaped.
    pub labels: Vec<(&'a str, String)>,
    pub value: f64,
}

/// The value of the sample of `name` whose labels are exactly `labels` (in
/// any order).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text)
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| s.value)
}

/// The series that occur more than once in `text`: a metric name with one
/// label set (in any order) twice, which OpenMetrics forbids and Prometheus
/// resolves by keeping one sample (so sums undercount), each as
/// `name{k="v",…}` with its labels sorted.
pub fn duplicate_series(text: &str) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut dup = Vec::new();
    for s in samples(text) {
        let mut l: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        l.sort();
        let key = format!("{}{{{}}}", s.name, l.join(","));
        if !seen.insert(key.clone()) {
            dup.push(key);
        }
    }
    dup
}

/// Panics when `text` has a series twice ([`duplicate_series`]); every
/// test that scrapes NCCL series checks its scrape with it.
pub fn assert_unique_series(text: &str) {
    let dup = duplicate_series(text);
    assert!(dup.is_empty(), "series exported twice: {dup:?}\n{text}");
}

/// Every sample line of `text` (comments, blank and malformed lines aside).
pub fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines().filter_map(sample)
}

fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(mut r) = rest.strip_prefix('{') {
        loop {
            r = r.trim_start_matches([',', ' ']);
            if let Some(after) = r.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = r.split_once('=')?;
            let (v, after) = quoted(after.strip_prefix('"')?)?;
            labels.push((key.trim(), v));
            r = after;
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// A label value up to its closing quote (unescaped), and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut v = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next()?.1 {
                'n' => v.push('\n'),
                c => v.push(c),
            },
            '"' => return Some((v, &s[i + 1..])),
            c => v.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::{io::BufRead as _, net::TcpListener};

    use super::*;

    const PAGE: &str = "\
# HELP faultline_ingest_rejected_total Windows refused.
# TYPE faultline_ingest_rejected_total counter
faultline_ingest_rejected_total{reason=\"clock_past\"} 3
faultline_ingest_rejected_total{reason=\"clock_future\"} 1
faultline_connections_refused_total{listener=\"grpc\",reason=\"per_peer\"} 17 1700000000000
faultline_history_write_errors_total 2
faultline_history_write_errors_total_other 9
faultline_odd{path=\"a \\\"b\\\" c\\\\d\",x=\"}\"} 0.25
";

    #[test]
    fn a_sample_is_found_by_name_and_exact_labels_in_any_order() {
        let v = |name, labels: &[(&str, &str)]| value(PAGE, name, labels);
        assert_eq!(
            v(
                "faultline_ingest_rejected_total",
                &[("reason", "clock_past")]
            ),
            Some(3.0)
        );
        assert_eq!(
            v(
                "faultline_connections_refused_total",
                &[("reason", "per_peer"), ("listener", "grpc")]
            ),
            Some(17.0),
            "label order and a timestamp do not matter"
        );
        assert_eq!(v("faultline_history_write_errors_total", &[]), Some(2.0));
        assert_eq!(
            v("faultline_odd", &[("path", "a \"b\" c\\d"), ("x", "}")]),
            Some(0.25)
        );
        // A subset of the labels, another name's prefix, or nothing: absent.
        assert_eq!(
            v(
                "faultline_connections_refused_total",
                &[("listener", "grpc")]
            ),
            None
        );
        assert_eq!(v("faultline_ingest_rejected_total", &[]), None);
        assert_eq!(v("faultline_history_write", &[]), None);
        assert_eq!(samples(PAGE).count(), 6);
    }

    #[test]
    fn a_series_twice_is_found_whatever_the_label_order() {
        assert!(duplicate_series(PAGE).is_empty());
        let page = format!(
            "{PAGE}faultline_odd{{x=\"}}\",path=\"a \\\"b\\\" c\\\\d\"}} 1\nfaultline_history_write_errors_total 3\n"
        );
        assert_eq!(
            duplicate_series(&page),
            vec![
                "faultline_odd{path=\"a \\\"b\\\" c\\\\d\",x=\"}\"}".to_string(),
                "faultline_history_write_errors_total{}".to_string()
            ]
        );
        assert!(std::panic::catch_unwind(|| assert_unique_series(&page)).is_err());
    }

    /// A one-shot HTTP server answering `response`; its address and the
    /// request line it received.
    fn serve_once(response: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            // The whole request (to its blank line), so closing after the
            // response leaves nothing unread.
            let mut r = io::BufReader::new(&s);
            let mut first = String::new();
            r.read_line(&mut first).expect("request line");
            let mut line = String::new();
            while r.read_line(&mut line).expect("header line") > 0 && line != "\r\n" {
                line.clear();
            }
            s.write_all(response.as_bytes()).expect("respond");
            first
        });
        (addr, h)
    }

    #[test]
    fn scrape_returns_the_body_and_refuses_an_error_status() {
        let (addr, h) = serve_once(
            "HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nfaultline_history_write_errors_total 4\n",
        );
        assert_eq!(
            counter(&addr, "faultline_history_write_errors_total", &[]),
            4
        );
        assert_eq!(h.join().expect("server"), "GET /metrics HTTP/1.0\r\n");
        let (addr, h) = serve_once("HTTP/1.0 404 Not Found\r\n\r\nno\n");
        let e = scrape(&addr).expect_err("404");
        assert!(e.to_string().ends_with("HTTP/1.0 404 Not Found"), "{e}");
        h.join().expect("server");
        let (addr, h) = serve_once("HTTP/1.0 200 OK\r\n\r\n");
        assert_eq!(counter(&addr, "faultline_absent_total", &[]), 0);
        h.join().expect("server");
    }
}
