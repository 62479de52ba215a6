//! Every key a config type can hold, found by deserializing it from a
//! tracer: each struct's field list is recorded (so an `Option` field that
//! serializes to nothing is still found), a struct field is a section
//! (`[otlp.limits]`), any other field a key (`otlp.limits.max_connections`).
//! A new field is found without being listed anywhere.
use std::{cell::RefCell, collections::BTreeSet};

use serde::de::{
    self, value::Error, DeserializeOwned, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess,
    SeqAccess, VariantAccess, Visitor,
};

/// The keys and sections of a config type, as dotted paths.
#[derive(Debug, Default, PartialEq)]
pub struct Traced {
    pub keys: BTreeSet<String>,
    pub sections: BTreeSet<String>,
}

/// Traces `T`: its sections and keys. An error names a field whose type
/// the tracer cannot make a value of (teach the tracer that type).
pub fn trace<T: DeserializeOwned>() -> Result<Traced, Error> {
    let seen = RefCell::new(Traced::default());
    T::deserialize(Tracer {
        path: String::new(),
        seen: &seen,
    })?;
    Ok(seen.into_inner())
}

struct Tracer<'a> {
    path: String,
    seen: &'a RefCell<Traced>,
}

impl Tracer<'_> {
    fn leaf(&self) {
        if !self.path.is_empty() {
            self.seen.borrow_mut().keys.insert(self.path.clone());
        }
    }
}

/// A leaf: recorded as a key, then visited with `$call`.
macro_rules! leaf {
    ($($name:ident => |$v:ident| $call:expr;)*) => {$(
        fn $name<V: Visitor<'de>>(self, $v: V) -> Result<V::Value, Error> {
            self.leaf();
            $call
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Tracer<'_> {
    type Error = Error;

    leaf! {
        deserialize_any => |v| v.visit_unit();
        deserialize_bool => |v| v.visit_bool(false);
        deserialize_i8 => |v| v.visit_i64(0);
        deserialize_i16 => |v| v.visit_i64(0);
        deserialize_i32 => |v| v.visit_i64(0);
        deserialize_i64 => |v| v.visit_i64(0);
        deserialize_u8 => |v| v.visit_u64(0);
        deserialize_u16 => |v| v.visit_u64(0);
        deserialize_u32 => |v| v.visit_u64(0);
        deserialize_u64 => |v| v.visit_u64(0);
        deserialize_f32 => |v| v.visit_f64(0.0);
        deserialize_f64 => |v| v.visit_f64(0.0);
        deserialize_char => |v| v.visit_char('x');
        deserialize_str => |v| v.visit_str("");
        deserialize_string => |v| v.visit_str("");
        deserialize_bytes => |v| v.visit_bytes(&[]);
        deserialize_byte_buf => |v| v.visit_bytes(&[]);
        deserialize_option => |v| v.visit_none();
        deserialize_unit => |v| v.visit_unit();
        deserialize_seq => |v| v.visit_seq(Items(0));
        deserialize_identifier => |v| v.visit_str("");
        deserialize_ignored_any => |v| v.visit_unit();
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.leaf();
        v.visit_map(Fields {
            names: &[],
            at: 0,
            path: String::new(),
            seen: self.seen,
        })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(v)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Error> {
        self.leaf();
        v.visit_seq(Items(len))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_tuple(len, v)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        if !self.path.is_empty() {
            self.seen.borrow_mut().sections.insert(self.path.clone());
        }
        v.visit_map(Fields {
            names: fields,
            at: 0,
            path: self.path,
            seen: self.seen,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        self.leaf();
        let first = variants.first().copied().unwrap_or_default();
        v.visit_enum(Unit(first))
    }
}

/// A struct's fields, each traced under its path.
struct Fields<'a> {
    names: &'static [&'static str],
    at: usize,
    path: String,
    seen: &'a RefCell<Traced>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, k: K) -> Result<Option<K::Value>, Error> {
        let Some(name) = self.names.get(self.at) else {
            return Ok(None);
        };
        k.deserialize((*name).into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, v: V) -> Result<V::Value, Error> {
        let name = self.names.get(self.at).copied().unwrap_or_default();
        self.at += 1;
        let path = if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        };
        v.deserialize(Tracer {
            path,
            seen: self.seen,
        })
    }
}

/// A tuple's items: unit values (their element types are not keys).
struct Items(usize);

impl<'de> SeqAccess<'de> for Items {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.0 == 0 {
            return Ok(None);
        }
        self.0 -= 1;
        // Not recorded: an element has no key of its own.
        let seen = RefCell::new(Traced::default());
        seed.deserialize(Tracer {
            path: String::new(),
            seen: &seen,
        })
        .map(Some)
    }
}

/// An enum's first variant, as a unit variant.
struct Unit(&'static str);

impl<'de> EnumAccess<'de> for Unit {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let v = seed.deserialize(self.0.into_deserializer())?;
        Ok((v, self))
    }
}

impl<'de> VariantAccess<'de> for Unit {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _: T) -> Result<T::Value, Error> {
        Err(not_unit(self.0))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Error> {
        Err(not_unit(self.0))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        Err(not_unit(self.0))
    }
}

/// The tracer takes an enum's first variant, which must carry no data.
fn not_unit(variant: &str) -> Error {
    de::Error::custom(format!("variant {variant} is not a unit variant"))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        #[serde(rename = "a")]
        A,
        B,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: u32,
        ratio: f64,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Section {
        unset: Option<String>,
        list: Vec<std::path::PathBuf>,
        table: HashMap<String, String>,
        mode: Mode,
        pair: (u8, u8),
        inner: Inner,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct File {
        top: bool,
        s: Section,
    }

    #[test]
    fn finds_every_field_option_and_nested_section() {
        let t = trace::<File>().expect("traced");
        let keys: Vec<_> = t.keys.iter().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "s.inner.n",
                "s.inner.ratio",
                "s.list",
                "s.mode",
                "s.pair",
                "s.table",
                "s.unset",
                "top"
            ]
        );
        let sections: Vec<_> = t.sections.iter().map(String::as_str).collect();
        assert_eq!(sections, ["s", "s.inner"]);
    }
}
