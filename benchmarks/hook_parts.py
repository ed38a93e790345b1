"""What each part of pipeprof.keras's hook costs a step, side by side in one process.

A small CNN on one repeated batch (steps of about 1.3 ms here, so tens of microseconds show),
trained by ``model.fit`` in rounds, each variant once a round:
  plain         a batch-end timing callback only (the baseline)
  plain-tflogs  the same callback taking TensorFlow's logs (no per-step conversion to numpy)
  pyfunc        the input-wait timestamp as PipeprofCallback takes it: a tf.py_function in train_step
  timestamp     tf.timestamp() in train_step, returned with the step's logs
  choice        the synthetic-twin choice (choose_from_datasets read through a tf.Variable)
  ts-var        tf.timestamp() assigned to a host variable, read by the callback each step
Prints each variant's median microseconds per step over the rounds; the overhead of a part is
its median minus plain's. For issue 14's target (hooked / plain >= 0.98 on a 14 ms step) a
part may cost about 280 us in all.

    .venv/bin/python benchmarks/hook_parts.py [ROUNDS]
"""
import time, statistics, sys
import tensorflow as tf
tf.get_logger().setLevel("ERROR")

def make():
    m = tf.keras.Sequential([tf.keras.layers.Input((32, 32, 3)), tf.keras.layers.Conv2D(8, 3, activation="relu"),
                             tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(3)])
    m.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m

x = tf.random.uniform((16, 32, 32, 3)); y = tf.zeros((16,), tf.int64)
base = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(2)

class T(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []
    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())

class TT(T):
    _supports_tf_logs = True

entered = [0.0]
def mark(b):
    entered[0] = time.perf_counter(); return b

def wrap_py(model):
    orig = model.train_step
    def step(data):
        flat = tf.nest.flatten(data)
        with tf.control_dependencies(flat):
            m = tf.py_function(mark, [tf.shape(flat[0])[0]], tf.int32)
        with tf.control_dependencies([m]):
            data = tf.nest.map_structure(tf.identity, data)
        return orig(data)
    model.train_step = step

def wrap_ts(model):
    orig = model.train_step
    def step(data):
        flat = tf.nest.flatten(data)
        with tf.control_dependencies(flat):
            t = tf.timestamp()
        with tf.control_dependencies([t]):
            data = tf.nest.map_structure(tf.identity, data)
        out = orig(data)
        out["_t"] = t
        return out
    model.train_step = step

def wrap_var(model):
    orig = model.train_step
    with tf.device("/CPU:0"):
        v = tf.Variable(0.0, dtype=tf.float64, trainable=False)
    model._v = v
    def step(data):
        flat = tf.nest.flatten(data)
        with tf.control_dependencies(flat):
            a = v.assign(tf.timestamp())
        with tf.control_dependencies([a]):
            data = tf.nest.map_structure(tf.identity, data)
        return orig(data)
    model.train_step = step

class TV(T):
    def on_train_batch_end(self, batch, logs=None):
        self.last = self.model._v.numpy()
        self.ends.append(time.perf_counter())

var = tf.Variable(1, dtype=tf.int64, trainable=False)
def chosen():
    choice = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat().map(lambda _: var.read_value())
    twin = tf.data.Dataset.from_tensors((x, y)).repeat()
    out = tf.data.Dataset.choose_from_datasets([twin, base], choice, stop_on_empty_dataset=True)
    o = tf.data.Options(); o.experimental_optimization.inject_prefetch = False
    o.experimental_optimization.map_parallelization = False
    return out.with_options(o)

VARIANTS = {
    "plain": (None, lambda: base, T),
    "plain-tflogs": (None, lambda: base, TT),
    "pyfunc": (wrap_py, lambda: base, T),
    "timestamp": (wrap_ts, lambda: base, T),
    "choice": (None, chosen, T),
    "ts-var": (wrap_var, lambda: base, TV),
}
N = 400
res = {k: [] for k in VARIANTS}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    for k, (wrap, ds, cb) in VARIANTS.items():
        m = make()
        if wrap: wrap(m)
        c = cb()
        m.fit(ds(), steps_per_epoch=N, epochs=1, verbose=0, callbacks=[c])
        e = c.ends[100:]
        res[k].append(1e6 * (e[-1] - e[0]) / (len(e) - 1))
for k, v in res.items():
    print(f"{k:14s} median {statistics.median(v):8.1f} us/step  rounds {[round(a) for a in v]}")
