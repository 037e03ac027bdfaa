//! Bytes in JSON: a string when they are UTF-8, `{"base64": "..."}`
//! (standard alphabet, padded) otherwise. Keys, values and a
//! compare-and-swap's current value travel this way, in requests and in
//! answers alike.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes as the HTTP API writes them in JSON.
///
/// ```
/// use palisade_wire::JsonBytes;
///
/// assert_eq!(serde_json::to_string(&JsonBytes::from("hello")).unwrap(), r#""hello""#);
/// let binary = JsonBytes::from(&[0xff, 0x00][..]);
/// assert_eq!(serde_json::to_string(&binary).unwrap(), r#"{"base64":"/wA="}"#);
/// let back: JsonBytes = serde_json::from_str(r#"{"base64":"/wA="}"#).unwrap();
/// assert_eq!(back, binary);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct JsonBytes(pub Bytes);

impl JsonBytes {
    /// The bytes.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl From<Bytes> for JsonBytes {
    fn from(bytes: Bytes) -> Self {
        JsonBytes(bytes)
    }
}

impl From<&[u8]> for JsonBytes {
    fn from(bytes: &[u8]) -> Self {
        JsonBytes(Bytes::copy_from_slice(bytes))
    }
}

impl From<Vec<u8>> for JsonBytes {
    fn from(bytes: Vec<u8>) -> Self {
        JsonBytes(Bytes::from(bytes))
    }
}

impl From<&str> for JsonBytes {
    fn from(text: &str) -> Self {
        JsonBytes(Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl From<JsonBytes> for Bytes {
    fn from(bytes: JsonBytes) -> Self {
        bytes.0
    }
}

impl Serialize for JsonBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => serializer.serialize_str(text),
            Err(_) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("base64", &STANDARD.encode(&self.0))?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for JsonBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonBytesVisitor)
    }
}

/// Reads either form, with an error that names both.
struct JsonBytesVisitor;

impl<'de> Visitor<'de> for JsonBytesVisitor {
    type Value = JsonBytes;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a string or {"base64": "..."}"#)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<JsonBytes, E> {
        Ok(JsonBytes::from(text))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<JsonBytes, E> {
        Ok(JsonBytes(Bytes::from(text.into_bytes())))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonBytes, A::Error> {
        let mut encoded: Option<String> = None;
        while let Some(field) = map.next_key::<String>()? {
            if field != "base64" {
                return Err(de::Error::unknown_field(&field, &["base64"]));
            }
            if encoded.is_some() {
                return Err(de::Error::duplicate_field("base64"));
            }
            encoded = Some(map.next_value()?);
        }
        let encoded = encoded.ok_or_else(|| de::Error::missing_field("base64"))?;
        STANDARD
            .decode(encoded.as_bytes())
            .map(JsonBytes::from)
            .map_err(|error| de::Error::custom(format_args!("invalid base64: {error}")))
    }
}

#[cfg(feature = "openapi")]
mod schema {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{
        AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, Type,
    };
    use utoipa::{PartialSchema, ToSchema};

    impl PartialSchema for super::JsonBytes {
        fn schema() -> RefOr<Schema> {
            let base64 = ObjectBuilder::new()
                .property(
                    "base64",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .content_encoding("base64"),
                )
                .required("base64")
                .additional_properties(Some(AdditionalProperties::FreeForm(false)));
            OneOfBuilder::new()
                .description(Some(
                    "Bytes: a string (its UTF-8 bytes), or `{\"base64\": ...}` for any bytes.",
                ))
                .item(ObjectBuilder::new().schema_type(Type::String))
                .item(base64)
                .into()
        }
    }

    impl ToSchema for super::JsonBytes {
        fn name() -> std::borrow::Cow<'static, str> {
            "JsonBytes".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_forms_are_refused_with_a_reason() {
        for (text, words) in [
            (r#"{"base64": "!!"}"#, "invalid base64"),
            (r#"{"hex": "00"}"#, "unknown field `hex`"),
            (r#"{}"#, "missing field `base64`"),
            (r#"{"base64": "AA==", "base64": "AA=="}"#, "duplicate field"),
            ("7", r#"a string or {"base64": "..."}"#),
        ] {
            let error = serde_json::from_str::<JsonBytes>(text).unwrap_err();
            assert!(error.to_string().contains(words), "{text}: {error}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let json = serde_json::to_string(&JsonBytes::from(bytes.clone())).unwrap();
            let back: JsonBytes = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(&back.0[..], &bytes[..]);
            prop_assert_eq!(json.starts_with('"'), std::str::from_utf8(&bytes).is_ok());
        }
    }
}
