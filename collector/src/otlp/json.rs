//! OTLP/JSON → the `opentelemetry-proto` request type the protobuf path
//! decodes, so both encodings share [`super::decode`].
//!
//! The OTLP specification's JSON encoding (the protobuf JSON mapping with
//! OTLP's rules): keys are the lowerCamelCase field names (the original
//! snake_case names are not valid keys and are ignored like any unknown key);
//! enum values are integers (their names are accepted too); 64-bit integers
//! are decimal strings or numbers (32-bit ones too); doubles are numbers or
//! `"NaN"`, `"Infinity"`, `"-Infinity"` (or a decimal string); bytes are
//! base64; `null` is the field's default. Unknown keys are ignored. Only
//! what the receiver uses is kept; the rest (scopes, exemplars and their hex
//! trace/span ids, flags, schema URLs, entity refs) is skipped, though a
//! JSON syntax error anywhere refuses the request.
//!
//! `opentelemetry-proto`'s own serde support (`with-serde`) is not used: its
//! flattened oneofs turn a malformed point or metric (a `flags` sent as a
//! string, a `sum` of `"NaN"`) silently into no data instead of an error, and
//! it refuses what protobuf JSON encoders emit for defaults (`{"arrayValue":
//! {}}`, a key-less `KeyValue`, `null`).
use std::{fmt, marker::PhantomData};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{any_value, AnyValue, ArrayValue, KeyValue, KeyValueList},
    metrics::v1::{
        exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
        AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge,
        Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        Summary, SummaryDataPoint,
    },
    resource::v1::Resource,
};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Decodes an OTLP/JSON `ExportMetricsServiceRequest`.
pub fn decode_request(body: &[u8]) -> Result<ExportMetricsServiceRequest, serde_json::Error> {
    serde_json::from_slice::<Msg<ExportMetricsServiceRequest>>(body).map(|m| m.0)
}

/// The JSON form of a protobuf value of type `Out`.
trait Wire<'de>: Deserialize<'de> {
    type Out;
    fn out(self) -> Self::Out;
}

/// A message: read key by key from a JSON object; `null` is the default.
trait Message: Default {
    /// Reads the value of `key` if it is a field this receiver keeps, else skips it.
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

fn get<'de, W: Wire<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<W::Out, A::Error> {
    Ok(map.next_value::<W>()?.out())
}

fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

struct Msg<T>(T);

impl<'de, T: Message> Deserialize<'de> for Msg<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Message> Visitor<'de> for V<T> {
            type Value = Msg<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Msg(T::default()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut m = T::default();
                while let Some(key) = map.next_key::<String>()? {
                    m.field(&key, &mut map)?;
                }
                Ok(Msg(m))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de, T: Message> Wire<'de> for Msg<T> {
    type Out = T;
    fn out(self) -> T {
        self.0
    }
}

/// A repeated field: a JSON array (`null` = empty).
struct Rep<W>(Vec<W>);

impl<'de, W: Wire<'de>> Deserialize<'de> for Rep<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<W>(PhantomData<W>);
        impl<'de, W: Wire<'de>> Visitor<'de> for V<W> {
            type Value = Rep<W>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON array")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Rep(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(w) = seq.next_element::<W>()? {
                    v.push(w);
                }
                Ok(Rep(v))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de, W: Wire<'de>> Wire<'de> for Rep<W> {
    type Out = Vec<W::Out>;
    fn out(self) -> Self::Out {
        // The wire types are newtypes: this collects in place.
        self.0.into_iter().map(Wire::out).collect()
    }
}

/// A scalar number read from a JSON number or a decimal string.
macro_rules! scalar {
    ($name:ident, $out:ty, $what:literal, |$v:ident| $from:expr) => {
        struct $name($out);
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_unit<E: de::Error>(self) -> Result<$name, E> {
                        Ok($name(<$out>::default()))
                    }
                    fn visit_u64<E: de::Error>(self, u: u64) -> Result<$name, E> {
                        self.visit_num(Num::U(u))
                    }
                    fn visit_i64<E: de::Error>(self, i: i64) -> Result<$name, E> {
                        self.visit_num(Num::I(i))
                    }
                    fn visit_f64<E: de::Error>(self, f: f64) -> Result<$name, E> {
                        self.visit_num(Num::F(f))
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$name, E> {
                        let n = Num::parse(s)
                            .ok_or_else(|| E::invalid_value(de::Unexpected::Str(s), &self))?;
                        self.visit_num(n)
                    }
                }
                impl V {
                    fn visit_num<E: de::Error>(self, $v: Num) -> Result<$name, E> {
                        let out: Option<$out> = $from;
                        out.map($name)
                            .ok_or_else(|| E::invalid_value(de::Unexpected::Other("number"), &self))
                    }
                }
                d.deserialize_any(V)
            }
        }
        impl Wire<'_> for $name {
            type Out = $out;
            fn out(self) -> $out {
                self.0
            }
        }
    };
}

/// A JSON number or the number in a string, as parsed.
#[derive(Clone, Copy)]
enum Num {
    U(u64),
    I(i64),
    F(f64),
}

impl Num {
    fn parse(s: &str) -> Option<Num> {
        match s {
            "NaN" => Some(Num::F(f64::NAN)),
            "Infinity" => Some(Num::F(f64::INFINITY)),
            "-Infinity" => Some(Num::F(f64::NEG_INFINITY)),
            _ => s
                .parse()
                .map(Num::U)
                .or_else(|_| s.parse().map(Num::I))
                .ok()
                .or_else(|| s.parse().ok().filter(|f: &f64| f.is_finite()).map(Num::F)),
        }
    }

    fn float(self) -> f64 {
        match self {
            Num::U(u) => u as f64,
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }

    /// The number as an integer, when it is one exactly.
    fn int(self) -> Option<i128> {
        match self {
            Num::U(u) => Some(i128::from(u)),
            Num::I(i) => Some(i128::from(i)),
            Num::F(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 2e19 => Some(f as i128),
            Num::F(_) => None,
        }
    }
}

scalar!(
    U64,
    u64,
    "an unsigned 64-bit integer (number or decimal string)",
    |n| n.int().and_then(|i| u64::try_from(i).ok())
);
scalar!(
    I64,
    i64,
    "a 64-bit integer (number or decimal string)",
    |n| n.int().and_then(|i| i64::try_from(i).ok())
);
scalar!(I32, i32, "a 32-bit integer", |n| n
    .int()
    .and_then(|i| i32::try_from(i).ok()));
scalar!(
    F64,
    f64,
    "a number, \"NaN\", \"Infinity\" or \"-Infinity\"",
    |n| Some(n.float())
);

/// A value serde reads as it is (`null` = its default).
macro_rules! plain {
    ($name:ident, $out:ty) => {
        struct $name($out);
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Option::<$out>::deserialize(d).map(|v| $name(v.unwrap_or_default()))
            }
        }
        impl Wire<'_> for $name {
            type Out = $out;
            fn out(self) -> $out {
                self.0
            }
        }
    };
}

plain!(Bool, bool);
plain!(Str, String);

/// `bytes`: base64, standard or URL-safe alphabet, padded or not.
struct Bytes(Vec<u8>);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Option::<String>::deserialize(d)?.unwrap_or_default();
        base64(&s)
            .map(Bytes)
            .ok_or_else(|| de::Error::invalid_value(de::Unexpected::Str(&s), &"base64"))
    }
}

impl Wire<'_> for Bytes {
    type Out = Vec<u8>;
    fn out(self) -> Vec<u8> {
        self.0
    }
}

fn base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // 6 leftover bits cannot end a valid encoding.
    (bits < 6).then_some(out)
}

/// `AggregationTemporality`: the integer, or the value's name.
struct Temporality(i32);

impl<'de> Deserialize<'de> for Temporality {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum E {
            Name(String),
            Int(I32),
        }
        match Option::<E>::deserialize(d)? {
            None => Ok(Temporality(0)),
            Some(E::Int(i)) => Ok(Temporality(i.0)),
            Some(E::Name(n)) => AggregationTemporality::from_str_name(&n)
                .map(|t| Temporality(t as i32))
                .or_else(|| n.parse::<i32>().ok().map(Temporality))
                .ok_or_else(|| {
                    de::Error::invalid_value(de::Unexpected::Str(&n), &"an AggregationTemporality")
                }),
        }
    }
}

impl Wire<'_> for Temporality {
    type Out = i32;
    fn out(self) -> i32 {
        self.0
    }
}

/// Generates `Message::field` from `"jsonKey" => field: Wire` lines; other
/// keys are skipped.
macro_rules! message {
    ($ty:ty { $($key:literal => $field:ident : $w:ty),* $(,)? }) => {
        impl Message for $ty {
            fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
                match key {
                    $($key => self.$field = get::<$w, A>(map)?,)*
                    _ => skip(map)?,
                }
                Ok(())
            }
        }
    };
}

type Attrs = Rep<Msg<KeyValue>>;

message!(ExportMetricsServiceRequest { "resourceMetrics" => resource_metrics: Rep<Msg<ResourceMetrics>> });
message!(ResourceMetrics {
    "resource" => resource: Opt<Msg<Resource>>,
    "scopeMetrics" => scope_metrics: Rep<Msg<ScopeMetrics>>,
});
message!(Resource { "attributes" => attributes: Attrs });
message!(ScopeMetrics { "metrics" => metrics: Rep<Msg<Metric>> });
message!(Gauge { "dataPoints" => data_points: Rep<Msg<NumberDataPoint>> });
message!(Sum {
    "dataPoints" => data_points: Rep<Msg<NumberDataPoint>>,
    "aggregationTemporality" => aggregation_temporality: Temporality,
    "isMonotonic" => is_monotonic: Bool,
});
message!(Histogram {
    "dataPoints" => data_points: Rep<Msg<HistogramDataPoint>>,
    "aggregationTemporality" => aggregation_temporality: Temporality,
});
message!(ExponentialHistogram {
    "dataPoints" => data_points: Rep<Msg<ExponentialHistogramDataPoint>>,
    "aggregationTemporality" => aggregation_temporality: Temporality,
});
message!(Summary { "dataPoints" => data_points: Rep<Msg<SummaryDataPoint>> });
// Summaries are dropped (counted per point): only their number matters.
message!(SummaryDataPoint {});
message!(HistogramDataPoint {
    "attributes" => attributes: Attrs,
    "startTimeUnixNano" => start_time_unix_nano: U64,
    "timeUnixNano" => time_unix_nano: U64,
    "count" => count: U64,
    "sum" => sum: Opt<F64>,
    "bucketCounts" => bucket_counts: Rep<U64>,
    "explicitBounds" => explicit_bounds: Rep<F64>,
    "min" => min: Opt<F64>,
    "max" => max: Opt<F64>,
});
message!(ExponentialHistogramDataPoint {
    "attributes" => attributes: Attrs,
    "startTimeUnixNano" => start_time_unix_nano: U64,
    "timeUnixNano" => time_unix_nano: U64,
    "count" => count: U64,
    "sum" => sum: Opt<F64>,
    "scale" => scale: I32,
    "zeroCount" => zero_count: U64,
    "positive" => positive: Opt<Msg<Buckets>>,
    "negative" => negative: Opt<Msg<Buckets>>,
    "min" => min: Opt<F64>,
    "max" => max: Opt<F64>,
    "zeroThreshold" => zero_threshold: F64,
});
message!(Buckets {
    "offset" => offset: I32,
    "bucketCounts" => bucket_counts: Rep<U64>,
});
message!(KeyValue {
    "key" => key: Str,
    "value" => value: Opt<Msg<AnyValue>>,
});
message!(ArrayValue { "values" => values: Rep<Msg<AnyValue>> });
message!(KeyValueList { "values" => values: Attrs });

/// An optional message, `optional` scalar or oneof member: `null` = `None`.
struct Opt<W>(Option<W>);

impl<'de, W: Wire<'de>> Deserialize<'de> for Opt<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<W>::deserialize(d).map(Opt)
    }
}

impl<'de, W: Wire<'de>> Wire<'de> for Opt<W> {
    type Out = Option<W::Out>;
    fn out(self) -> Self::Out {
        self.0.map(Wire::out)
    }
}

impl Message for Metric {
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let data = match key {
            "name" => {
                self.name = get::<Str, A>(map)?;
                return Ok(());
            }
            "unit" => {
                self.unit = get::<Str, A>(map)?;
                return Ok(());
            }
            "gauge" => get::<Opt<Msg<Gauge>>, A>(map)?.map(Data::Gauge),
            "sum" => get::<Opt<Msg<Sum>>, A>(map)?.map(Data::Sum),
            "histogram" => get::<Opt<Msg<Histogram>>, A>(map)?.map(Data::Histogram),
            "exponentialHistogram" => {
                get::<Opt<Msg<ExponentialHistogram>>, A>(map)?.map(Data::ExponentialHistogram)
            }
            "summary" => get::<Opt<Msg<Summary>>, A>(map)?.map(Data::Summary),
            _ => return skip(map),
        };
        if data.is_some() {
            self.data = data;
        }
        Ok(())
    }
}

impl Message for NumberDataPoint {
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        use number_data_point::Value;
        match key {
            "attributes" => self.attributes = get::<Attrs, A>(map)?,
            "startTimeUnixNano" => self.start_time_unix_nano = get::<U64, A>(map)?,
            "timeUnixNano" => self.time_unix_nano = get::<U64, A>(map)?,
            "asDouble" => {
                if let Some(v) = get::<Opt<F64>, A>(map)? {
                    self.value = Some(Value::AsDouble(v));
                }
            }
            "asInt" => {
                if let Some(v) = get::<Opt<I64>, A>(map)? {
                    self.value = Some(Value::AsInt(v));
                }
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl Message for AnyValue {
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        use any_value::Value;
        let v = match key {
            "stringValue" => get::<Opt<Str>, A>(map)?.map(Value::StringValue),
            "boolValue" => get::<Opt<Bool>, A>(map)?.map(Value::BoolValue),
            "intValue" => get::<Opt<I64>, A>(map)?.map(Value::IntValue),
            "doubleValue" => get::<Opt<F64>, A>(map)?.map(Value::DoubleValue),
            "arrayValue" => get::<Opt<Msg<ArrayValue>>, A>(map)?.map(Value::ArrayValue),
            "kvlistValue" => get::<Opt<Msg<KeyValueList>>, A>(map)?.map(Value::KvlistValue),
            "bytesValue" => get::<Opt<Bytes>, A>(map)?.map(Value::BytesValue),
            _ => return skip(map),
        };
        if v.is_some() {
            self.value = v;
        }
        Ok(())
    }
}
