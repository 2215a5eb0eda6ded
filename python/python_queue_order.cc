#include "python/python_queue_order.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "python/request_view.h"

namespace py = pybind11;

namespace servelab::python {

namespace {

// One key component; false when `v` is not a finite number.
bool to_key_component(const py::handle& component, long double& out) {
  // NumPy's integers (np.int64(...)) as ints; its float64 is a float already.
  const py::object v = as_index(py::reinterpret_borrow<py::object>(component));
  if (PyLong_Check(v.ptr())) {  // bool included
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0) return false;
    out = static_cast<long double>(x);
    return true;
  }
  if (PyFloat_Check(v.ptr())) {
    const double x = PyFloat_AsDouble(v.ptr());
    if (!std::isfinite(x)) return false;
    out = static_cast<long double>(x);
    return true;
  }
  return false;
}

}  // namespace

PythonQueueOrder::PythonQueueOrder(std::shared_ptr<const PythonPolicy> policy, py::object params)
    : policy_(std::move(policy)), params_(std::move(params)) {}

PythonQueueOrder::~PythonQueueOrder() { release_python_object(params_); }

std::vector<long double> PythonQueueOrder::compute_key(const Request& r) const {
  std::vector<long double> key;
  py::gil_scoped_acquire gil;
  const py::object view = make_request_view(r);
  py::object result;
  try {
    result = params_.is_none() ? policy_->fn()(view) : policy_->fn()(view, params_);
  } catch (py::error_already_set& e) {
    invalidate_request_view(view);
    policy_->fail(e);
  }
  invalidate_request_view(view);
  long double c = 0;
  bool ok = true;
  if (PyTuple_Check(result.ptr())) {
    for (const py::handle item : py::reinterpret_borrow<py::tuple>(result)) {
      ok = ok && to_key_component(item, c);
      key.push_back(c);
    }
    ok = ok && !key.empty();
  } else {
    ok = to_key_component(result, c);
    key.push_back(c);
  }
  if (!ok) {
    policy_->fail(
        "expected the key to be a finite int or float or a non-empty tuple of them, got " +
        py::repr(result).cast<std::string>() + " for request " + std::to_string(r.id()));
  }
  return key;
}

void PythonQueueOrder::insert(Request* r) {
  std::vector<long double> key;
  try {
    key = compute_key(*r);
  } catch (...) {
    // Queued anyway (last), so the scheduler still owns the request when the run unwinds.
    where_[r] = order_.insert({{std::numeric_limits<long double>::infinity()}, r->id(), r}).first;
    throw;
  }
  where_[r] = order_.insert({std::move(key), r->id(), r}).first;
}

bool PythonQueueOrder::ranks_before(const Request& a, const Request& b) const {
  const auto key_of = [this](const Request& r) {
    const auto it = where_.find(&r);
    if (it != where_.end()) return it->second->key;
    return compute_key(r);  // may throw: the scheduler ranks on copies, nothing is lost
  };
  const std::vector<long double> ka = key_of(a), kb = key_of(b);
  if (ka != kb) return ka < kb;
  return a.id() < b.id();
}

void PythonQueueOrder::pop_front() {
  where_.erase(order_.begin()->request);
  order_.erase(order_.begin());
}

bool PythonQueueOrder::erase(Request* r) {
  const auto it = where_.find(r);
  if (it == where_.end()) return false;
  order_.erase(it->second);
  where_.erase(it);
  return true;
}

std::vector<Request*> PythonQueueOrder::snapshot() const {
  std::vector<Request*> out;
  out.reserve(order_.size());
  for (const Entry& e : order_) out.push_back(e.request);
  return out;
}

}  // namespace servelab::python
