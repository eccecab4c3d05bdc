"""Writes scikit-learn pipelines converted by skl2onnx into DIR, with the inputs they are checked
on: DIR/<name>.onnx and DIR/<name>.npz.

usage: python scripts/make_sklearn.py DIR
       python scripts/make_sklearn.py --fixtures fixtures/sklearn
       (needs scikit-learn, skl2onnx, pandas, onnx, numpy; --fixtures also onnxruntime)

Most models are a `Pipeline` of a `ColumnTransformer` (a `StandardScaler` on four float columns,
a `OneHotEncoder` on a string column and an int64 column) and an estimator, trained on a fixed
synthetic data set (numpy seed 0, 200 rows), so every run writes the same files:

- `sklearn_gbr`: a `GradientBoostingRegressor` (TreeEnsembleRegressor);
- `sklearn_rf_clf`: a `RandomForestClassifier` on three string classes, with ZipMap;
- `sklearn_logreg`: a `LogisticRegression` on three int classes, with ZipMap;
- `sklearn_gbc_binary`: a binary `GradientBoostingClassifier` (int labels), with ZipMap;
- `sklearn_linreg`: a `LinearRegression` after the same transformer;
- `sklearn_gbc_multi`: a `GradientBoostingClassifier` on three string classes, with ZipMap;
- `sklearn_logreg_binary`: a binary `LogisticRegression`, with ZipMap;
- `sklearn_linreg`: a `LinearRegression`;
- `sklearn_svc`: an `SVC` (RBF kernel) with probabilities, with ZipMap;
- `sklearn_misc`: `SimpleImputer` (NaN to the mean), `Normalizer` (L2) and a `LinearSVR`
  on one float input;
- `sklearn_binarizer`: `Binarizer` and a `LinearRegression` on one float input.

Each pipeline takes one input per column (`num0`..`num3` float, `colour` string, `size`
int64), as skl2onnx converts a `ColumnTransformer` over a table.

`scripts/check_sklearn.py` runs them in multigather and onnxruntime (rtol 1e-5) and verifies
the rewrite of each.

With `--fixtures`, it writes two small committed fixtures instead, in the test-data layout with
onnxruntime's outputs (`cargo test` compares the interpreter with them, without Python): the
regressor pipeline with 8 trees and a `RandomForestClassifier` pipeline with 4 trees, both
without ZipMap (its output is not a tensor), on the first 12 rows.
"""
import os
import sys

import numpy as np
import pandas as pd
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                              RandomForestClassifier)
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import Binarizer, Normalizer, OneHotEncoder, StandardScaler
from sklearn.svm import SVC, LinearSVR

N = 200
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}


def data(rng):
    """The synthetic table (four float columns, a colour, a size) and its targets."""
    num = rng.standard_normal((N, 4)).astype(np.float32)
    colour = rng.choice(np.array(["red", "green", "blue"], dtype=object), size=(N, 1))
    size = rng.integers(0, 4, size=(N, 1)).astype(np.int64)
    score = num[:, 0] * 2 - num[:, 1] + (colour[:, 0] == "red") * 1.5 + size[:, 0] * 0.3
    targets = {
        "reg": (score + 0.1 * rng.standard_normal(N)).astype(np.float32),
        "str": np.where(score < -0.5, "low", np.where(score < 1.0, "mid", "high")),
        "int": np.digitize(score, [-0.5, 1.0]).astype(np.int64),
        "bin": (score > 0.3).astype(np.int64),
    }
    table = pd.DataFrame({f"num{i}": num[:, i] for i in range(4)})
    table["colour"] = colour[:, 0]
    table["size"] = size[:, 0]
    # skl2onnx takes one input per column of the table.
    initial = [(f"num{i}", FloatTensorType([None, 1])) for i in range(4)]
    initial += [("colour", StringTensorType([None, 1])), ("size", Int64TensorType([None, 1]))]
    feeds = {f"num{i}": num[:, i:i + 1] for i in range(4)}
    feeds["colour"] = colour.astype(str).astype(object)
    feeds["size"] = size
    return num, table, initial, feeds, targets


def pipe(est):
    """The column transformer followed by `est`."""
    return Pipeline([
        ("prep", ColumnTransformer([
            ("num", StandardScaler(), ["num0", "num1", "num2", "num3"]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["colour", "size"]),
        ])),
        ("model", est),
    ])


def write(onx, feeds, out_dir, name):
    with open(os.path.join(out_dir, f"{name}.onnx"), "wb") as f:
        f.write(onx.SerializeToString())
    np.savez(os.path.join(out_dir, f"{name}.npz"),
             **{k: (v.astype(str) if v.dtype == object else v) for k, v in feeds.items()})


def write_fixture(onx, feeds, out_dir):
    """model.onnx and test_data_set_0 with onnxruntime's outputs."""
    import onnxruntime as ort
    from onnx import numpy_helper
    data_dir = os.path.join(out_dir, "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.onnx"), "wb") as f:
        f.write(onx.SerializeToString())
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = sess.run(None, feeds)
    values = [feeds[i.name] for i in onx.graph.input]
    for kind, vals, decls in (("input", values, onx.graph.input),
                              ("output", outputs, onx.graph.output)):
        for k, (value, decl) in enumerate(zip(vals, decls)):
            t = numpy_helper.from_array(np.asarray(value), decl.name)
            with open(os.path.join(data_dir, f"{kind}_{k}.pb"), "wb") as f:
                f.write(t.SerializeToString())


def fixtures(out_dir):
    _, table, initial, feeds, y = data(np.random.default_rng(0))
    rows = {k: v[:12] for k, v in feeds.items()}
    no_zipmap = {"zipmap": False}
    for name, model, options in (
        ("gbr", pipe(GradientBoostingRegressor(n_estimators=8, max_depth=2, random_state=0))
         .fit(table, y["reg"]), None),
        ("rf_clf", pipe(RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0))
         .fit(table, y["str"]), {RandomForestClassifier: no_zipmap}),
    ):
        onx = convert_sklearn(model, f"sklearn_{name}", initial, target_opset=TARGET_OPSET,
                              options=options)
        write_fixture(onx, rows, os.path.join(out_dir, name))
    print("wrote", sorted(os.listdir(out_dir)))


def main():
    if sys.argv[1] == "--fixtures":
        return fixtures(sys.argv[2])
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    num, table, initial, feeds, y = data(np.random.default_rng(0))

    def save(model, name):
        write(convert_sklearn(model, name, initial, target_opset=TARGET_OPSET), feeds, out_dir,
              name)

    save(pipe(GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0))
         .fit(table, y["reg"]), "sklearn_gbr")
    save(pipe(RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0))
         .fit(table, y["str"]), "sklearn_rf_clf")
    save(pipe(LogisticRegression(max_iter=500)).fit(table, y["int"]), "sklearn_logreg")
    save(pipe(GradientBoostingClassifier(n_estimators=20, max_depth=2, random_state=0))
         .fit(table, y["bin"]), "sklearn_gbc_binary")
    save(pipe(GradientBoostingClassifier(n_estimators=10, max_depth=2, random_state=0))
         .fit(table, y["str"]), "sklearn_gbc_multi")
    save(pipe(LinearRegression()).fit(table, y["reg"]), "sklearn_linreg")
    save(pipe(SVC(probability=True, random_state=0)).fit(table, y["int"]), "sklearn_svc")
    save(pipe(LogisticRegression(max_iter=500)).fit(table, y["bin"]), "sklearn_logreg_binary")

    # Element-wise preprocessors on one float input.
    x = num.copy()
    x[::7, 2] = np.nan
    one = [("X", FloatTensorType([None, 4]))]
    misc = Pipeline([
        ("impute", SimpleImputer(strategy="mean")),
        ("norm", Normalizer(norm="l2")),
        ("svr", LinearSVR(random_state=0, max_iter=5000)),
    ]).fit(x, y["reg"])
    write(convert_sklearn(misc, "sklearn_misc", one, target_opset=TARGET_OPSET), {"X": x},
          out_dir, "sklearn_misc")
    binar = Pipeline([("bin", Binarizer(threshold=0.2)), ("lr", LinearRegression())])
    binar.fit(num, y["reg"])
    write(convert_sklearn(binar, "sklearn_binarizer", one, target_opset=TARGET_OPSET),
          {"X": num}, out_dir, "sklearn_binarizer")
    print("wrote", sorted(os.listdir(out_dir)))


if __name__ == "__main__":
    main()
