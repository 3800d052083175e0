//! Python values to JSON values, for arguments crossing into Rust.
//!
//! A direct walk over the types JSON has (`None`, `bool`, `int`, `float`,
//! `str`, lists, tuples, dicts with string keys); anything else goes
//! through `pythonize`. pythonize probes every object for dataclass fields
//! first, which raises (and formats) an `AttributeError` per dict: the
//! direct walk keeps a tool call's argument conversion off that path.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// How deeply values may nest (serde_json's own parsing limit): deeper
/// values, and cyclic ones, are refused instead of overflowing the stack.
pub const MAX_DEPTH: usize = 128;

/// Convert `obj` into JSON; a value nested deeper than [`MAX_DEPTH`] (or
/// containing itself) is a `ValueError`.
pub fn to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    convert(obj, 0)
}

fn convert(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "the value nests deeper than {MAX_DEPTH} levels (or contains itself); flatten it"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_string()));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::Number(u.into()));
        }
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| PyTypeError::new_err(format!("{} is not a JSON number", f.value())));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err("JSON object keys must be strings"))?
                .to_str()?
                .to_string();
            map.insert(key, convert(&v, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|v| convert(&v, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|v| convert(&v, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    // Anything else (a dataclass, a mapping, a set): pythonize, whose own
    // recursion is bounded by what it converts into (checked below).
    let value: Value =
        pythonize::depythonize(obj).map_err(|e| PyTypeError::new_err(e.to_string()))?;
    if crate::core::registry::json_depth(&value) + depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "the value nests deeper than {MAX_DEPTH} levels; flatten it"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::to_json;
    use pyo3::prelude::*;
    use serde_json::json;

    #[test]
    fn python_values_become_json() {
        Python::initialize();
        Python::attach(|py| {
            let obj = py
                .eval(
                    c"{'a': [1, 2.5, None, True, 'x', (3,)], 'b': {'c': -7, 'd': 2**64 - 1}}",
                    None,
                    None,
                )
                .unwrap();
            assert_eq!(
                to_json(&obj).unwrap(),
                json!({"a": [1, 2.5, null, true, "x", [3]], "b": {"c": -7, "d": 18446744073709551615u64}})
            );
            let bad = py.eval(c"{1: 2}", None, None).unwrap();
            assert!(to_json(&bad).is_err());
            let cyclic = py
                .eval(
                    c"(lambda d: (d.__setitem__('self', d), d)[1])({})",
                    None,
                    None,
                )
                .unwrap();
            let err = to_json(&cyclic).unwrap_err();
            assert!(err.to_string().contains("contains itself"), "{err}");
            let deep = py
                .eval(
                    c"__import__('functools').reduce(lambda a, _: [a], range(100000), [])",
                    None,
                    None,
                )
                .unwrap();
            assert!(to_json(&deep).is_err());
        });
    }
}
