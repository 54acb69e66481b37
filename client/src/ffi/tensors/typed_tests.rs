use super::*;

#[test]
fn every_dtype_round_trips_through_the_c_layout() {
    for (code, (name, size)) in DTYPES.iter().enumerate() {
        let values: Vec<f64> = match *name {
            "bool" => vec![0.0, 1.0, 1.0],
            "uint8" => vec![0.0, 200.0, 255.0],
            "int8" => vec![-128.0, -1.0, 127.0],
            "float16" | "bfloat16" => vec![-2.5, 0.0, 1.5],
            _ => vec![-3.0, 0.5_f64.floor(), 7.0],
        };
        let t = TensorValue {
            dtype: name.to_string(),
            shape: vec![1, 3],
            data: values.clone(),
        };
        let (c, shape, bytes) = tensor_out(&t).expect("out");
        assert_eq!((c as usize, bytes.len()), (code, 3 * size), "{name}");
        let words = aligned(&bytes);
        let back = FerryTensor {
            dtype: c,
            shape: shape.as_ptr(),
            ndim: shape.len(),
            data: words.as_ptr().cast(),
            nbytes: bytes.len(),
        };
        // SAFETY: the pointers are to live local buffers of the sizes given.
        let read = unsafe { tensor_in(0, &back) }.expect("in");
        assert_eq!(read, t, "{name}");
    }
}

#[test]
fn outputs_that_do_not_fit_their_c_type_are_refused() {
    let t = |dtype: &str, v: f64| TensorValue {
        dtype: dtype.into(),
        shape: vec![1],
        data: vec![v],
    };
    assert!(tensor_out(&t("int8", 300.0)).is_err());
    assert!(tensor_out(&t("uint8", -1.0)).is_err());
    assert!(tensor_out(&t("int32", 0.5)).is_err());
    assert!(tensor_out(&t("int64", 9_007_199_254_740_992.0)).is_err());
    assert!(tensor_out(&t("complex", 1.0)).is_err());
}
