"""Writes scikit-learn pipelines converted by skl2onnx into DIR, with the inputs they are checked
on: DIR/<name>.onnx and DIR/<name>.npz.

usage: python scripts/make_sklearn.py DIR   (needs scikit-learn, skl2onnx, onnx, numpy)

Every model is a `Pipeline` of a `ColumnTransformer` (a `StandardScaler` on four float columns, a
`OneHotEncoder` on a string column and an int64 column) and an estimator, trained on a fixed
synthetic data set (numpy seed 0), so every run writes the same files:

- `sklearn_gbr`: a `GradientBoostingRegressor` (TreeEnsembleRegressor);
- `sklearn_rf_clf`: a `RandomForestClassifier` on three string classes, with ZipMap;
- `sklearn_logreg`: a `LogisticRegression` on three int classes, with ZipMap;
- `sklearn_gbc_binary`: a binary `GradientBoostingClassifier` (int labels), with ZipMap;
- `sklearn_linreg`: a `LinearRegression` after the same transformer;
- `sklearn_svc`: an `SVC` with probabilities and an `SVR`-free scaler pipeline;
- `sklearn_misc`: `Normalizer`, `Binarizer`, `SimpleImputer` (constant) and a `LinearSVR`.

`scripts/check_sklearn.py` runs them in multigather and onnxruntime (rtol 1e-5) and verifies
the rewrite of each.
"""
import os
import sys

import numpy as np
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType
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
    num = rng.standard_normal((N, 4)).astype(np.float32)
    colour = rng.choice(np.array(["red", "green", "blue"], dtype=object), size=(N, 1))
    size = rng.integers(0, 4, size=(N, 1)).astype(np.int64)
    return num, colour, size


def frame(num, colour, size):
    import pandas as pd
    return pd.DataFrame({"num": list(num), "colour": colour[:, 0], "size": size[:, 0]})


def transformer():
    return ColumnTransformer([
        ("num", StandardScaler(), [0, 1, 2, 3]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), [4, 5]),
    ])


def stacked(num, colour, size):
    return np.concatenate([num.astype(object), colour, size.astype(object)], axis=1)


INITIAL = [
    ("num", FloatTensorType([None, 4])),
    ("colour", StringTensorType([None, 1])),
    ("size", Int64TensorType([None, 1])),
]


class Split:
    """Routes the three typed inputs to the column transformer's columns."""


def convert(model, name, out_dir, feeds, options=None):
    from skl2onnx import to_onnx  # noqa: F401
    onx = convert_sklearn(model, name, INITIAL if feeds is not None and len(feeds) == 3 else
                          [("X", FloatTensorType([None, feeds["X"].shape[1]]))],
                          target_opset=TARGET_OPSET, options=options)
    with open(os.path.join(out_dir, f"{name}.onnx"), "wb") as f:
        f.write(onx.SerializeToString())
    np.savez(os.path.join(out_dir, f"{name}.npz"), **feeds)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    num, colour, size = data(rng)
    score = num[:, 0] * 2 - num[:, 1] + (colour[:, 0] == "red") * 1.5 + size[:, 0] * 0.3
    y_reg = (score + 0.1 * rng.standard_normal(N)).astype(np.float32)
    y_str = np.where(score < -0.5, "low", np.where(score < 1.0, "mid", "high"))
    y_int = np.digitize(score, [-0.5, 1.0]).astype(np.int64)
    y_bin = (score > 0.3).astype(np.int64)

    # The column transformer takes one table; skl2onnx gets one input per column group.
    ct = ColumnTransformer([
        ("num", StandardScaler(), ["num0", "num1", "num2", "num3"]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["colour", "size"]),
    ])
    import pandas as pd
    table = pd.DataFrame({f"num{i}": num[:, i] for i in range(4)})
    table["colour"] = colour[:, 0]
    table["size"] = size[:, 0]
    initial = [(f"num{i}", FloatTensorType([None, 1])) for i in range(4)]
    initial += [("colour", StringTensorType([None, 1])), ("size", Int64TensorType([None, 1]))]
    feeds = {f"num{i}": num[:, i:i + 1] for i in range(4)}
    feeds["colour"] = colour.astype(str)
    feeds["size"] = size

    def save(model, name, options=None):
        onx = convert_sklearn(model, name, initial, target_opset=TARGET_OPSET, options=options)
        with open(os.path.join(out_dir, f"{name}.onnx"), "wb") as f:
            f.write(onx.SerializeToString())
        np.savez(os.path.join(out_dir, f"{name}.npz"), **feeds)

    def pipe(est):
        from sklearn.base import clone
        return Pipeline([("prep", clone(ct)), ("model", est)])

    save(pipe(GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0))
         .fit(table, y_reg), "sklearn_gbr")
    save(pipe(RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0))
         .fit(table, y_str), "sklearn_rf_clf")
    save(pipe(LogisticRegression(max_iter=500)).fit(table, y_int), "sklearn_logreg")
    save(pipe(GradientBoostingClassifier(n_estimators=20, max_depth=2, random_state=0))
         .fit(table, y_bin), "sklearn_gbc_binary")
    save(pipe(GradientBoostingClassifier(n_estimators=10, max_depth=2, random_state=0))
         .fit(table, y_str), "sklearn_gbc_multi")
    save(pipe(LinearRegression()).fit(table, y_reg), "sklearn_linreg")
    save(pipe(SVC(probability=True, random_state=0)).fit(table, y_int), "sklearn_svc")
    save(pipe(LogisticRegression(max_iter=500)).fit(table, y_bin), "sklearn_logreg_binary")

    # Element-wise preprocessors on one float input.
    x = num.copy()
    x[::7, 2] = np.nan
    misc = Pipeline([
        ("impute", SimpleImputer(strategy="mean")),
        ("norm", Normalizer(norm="l2")),
        ("svr", LinearSVR(random_state=0, max_iter=5000)),
    ]).fit(x, y_reg)
    onx = convert_sklearn(misc, "sklearn_misc", [("X", FloatTensorType([None, 4]))],
                          target_opset=TARGET_OPSET)
    with open(os.path.join(out_dir, "sklearn_misc.onnx"), "wb") as f:
        f.write(onx.SerializeToString())
    np.savez(os.path.join(out_dir, "sklearn_misc.npz"), X=x)
    binar = Pipeline([("bin", Binarizer(threshold=0.2)), ("lr", LinearRegression())]).fit(num, y_reg)
    onx = convert_sklearn(binar, "sklearn_binarizer", [("X", FloatTensorType([None, 4]))],
                          target_opset=TARGET_OPSET)
    with open(os.path.join(out_dir, "sklearn_binarizer.onnx"), "wb") as f:
        f.write(onx.SerializeToString())
    np.savez(os.path.join(out_dir, "sklearn_binarizer.npz"), X=num)
    print("wrote", sorted(os.listdir(out_dir)))


if __name__ == "__main__":
    main()
