//! The wire shapes, read into typed structs by bounded deserializers (unknown fields unread).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::MAX_TOOL_CALLS;

#[derive(Deserialize)]
pub(super) struct Chunk {
    #[serde(default, deserialize_with = "first_only")]
    pub(super) choices: Option<StreamChoice>,
    pub(super) usage: Option<Usage>,
    pub(super) error: Option<ErrorMessage>,
}

#[derive(Deserialize)]
pub(super) struct StreamChoice {
    pub(super) delta: Option<Delta>,
    #[serde(default, deserialize_with = "text_or_skip")]
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Delta {
    #[serde(default, deserialize_with = "text_or_skip")]
    pub(super) content: Option<String>,
    #[serde(default, deserialize_with = "at_most_tool_calls")]
    pub(super) tool_calls: Vec<Fragment>,
}

#[derive(Deserialize)]
pub(super) struct Fragment {
    pub(super) index: Option<u64>,
    pub(super) id: Option<String>,
    pub(super) function: Option<FunctionPart>,
}

#[derive(Default, Deserialize)]
pub(super) struct FunctionPart {
    pub(super) name: Option<String>,
    pub(super) arguments: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Completion {
    #[serde(default, deserialize_with = "first_only")]
    pub(super) choices: Option<CompletionChoice>,
    pub(super) usage: Option<Usage>,
    pub(super) error: Option<ErrorMessage>,
}

#[derive(Deserialize)]
pub(super) struct CompletionChoice {
    pub(super) message: Option<Message>,
    #[serde(default, deserialize_with = "text_or_skip")]
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Message {
    #[serde(default, deserialize_with = "text_or_skip")]
    pub(super) content: Option<String>,
    #[serde(default, deserialize_with = "at_most_tool_calls")]
    pub(super) tool_calls: Vec<WholeCall>,
}

/// A text field (`content`, `finish_reason`); any other JSON value
/// (`"content": 5`, an object, an array) is read without being stored and
/// is no value, as a field missing is: one malformed field does not fail
/// the answer. What decides a tool call (its id, name, arguments, index)
/// stays strict: a call is never run on a guess.
fn text_or_skip<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// The first element of an array (the only choice asked for); the rest are
/// read without being stored. `null`, and `null` elements, are no element
/// (as other clients skip them).
fn first_only<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<T>, A::Error> {
            let mut first = None;
            while let Some(item) = seq.next_element::<Option<T>>()? {
                if item.is_some() {
                    first = item;
                    break;
                }
            }
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(first)
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}

/// An array of at most [`MAX_TOOL_CALLS`] tool calls or fragments; longer
/// is an error before anything past the bound is stored. `null` is empty;
/// `null` elements are skipped.
fn at_most_tool_calls<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "an array of at most {MAX_TOOL_CALLS} tool calls")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Vec<T>, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<Option<T>>()? {
                let Some(item) = item else { continue };
                if out.len() == MAX_TOOL_CALLS {
                    return Err(de::Error::invalid_length(MAX_TOOL_CALLS + 1, &self));
                }
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}

#[derive(Deserialize)]
pub(super) struct WholeCall {
    pub(super) id: Option<String>,
    pub(super) function: Option<FunctionPart>,
}

/// An `error` member: its `message` when it is an object with one, the
/// string itself when it is a string.
pub(super) struct ErrorMessage(pub(super) String);

impl<'de> Deserialize<'de> for ErrorMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ErrorMessage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an error object or message")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ErrorMessage, E> {
                Ok(ErrorMessage(s.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ErrorMessage, A::Error> {
                let mut message = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "message" && message.is_none() {
                        message = map.next_value::<Option<String>>()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ErrorMessage(
                    message.unwrap_or_else(|| "error in stream".into()),
                ))
            }
        }
        d.deserialize_any(V)
    }
}

/// Entries kept per `usage` object (OpenAI sends under a dozen).
const MAX_USAGE_ENTRIES: usize = 64;

/// `usage`: scalars and objects of scalars one level down (OpenAI's
/// `*_tokens_details`); arrays, deeper values and entries past
/// [`MAX_USAGE_ENTRIES`] are skipped.
pub(super) struct Usage(pub(super) Map<String, Value>);

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match (Shallow { depth: 2 }).deserialize(d)? {
            Some(Value::Object(map)) => Ok(Usage(map)),
            _ => Ok(Usage(Map::new())),
        }
    }
}

/// A value kept only if it is a scalar, or an object of such nested at most
/// `depth` deep; `None` for anything else, read without being stored.
#[derive(Clone, Copy)]
struct Shallow {
    pub(super) depth: u8,
}

impl<'de> DeserializeSeed<'de> for Shallow {
    type Value = Option<Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Shallow {
    type Value = Option<Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a usage value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<Value>, E> {
        Ok(Some(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<Value>, E> {
        Ok(Some(Value::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<Value>, E> {
        Ok(Some(Value::from(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<Value>, E> {
        Ok(Some(Value::from(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<Value>, E> {
        Ok(Some(Value::String(v.to_string())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Value>, E> {
        Ok(Some(Value::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<Value>, E> {
        Ok(Some(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        if self.depth == 0 {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(None);
        }
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.len() >= MAX_USAGE_ENTRIES {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let inner = Shallow {
                depth: self.depth - 1,
            };
            if let Some(value) = map.next_value_seed(inner)? {
                out.insert(key, value);
            }
        }
        Ok(Some(Value::Object(out)))
    }
}
