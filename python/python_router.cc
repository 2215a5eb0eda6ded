#include "python/python_router.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "core/block_hash.h"

namespace py = pybind11;

namespace servelab::python {

PythonRouter::PythonRouter(std::shared_ptr<const PythonPolicy> policy, py::object call,
                           py::object params, std::int32_t block_size)
    : policy_(std::move(policy)),
      call_(std::move(call)),
      params_(std::move(params)),
      block_size_(block_size) {}

PythonRouter::~PythonRouter() {
  release_python_object(call_);
  release_python_object(params_);
}

std::size_t PythonRouter::route(const RequestSpec& spec, std::span<const ReplicaLoad> candidates) {
  py::gil_scoped_acquire gil;
  py::object result;
  try {
    py::object request = py::cast(RouteRequest{spec, block_size_});
    py::list loads;
    for (const ReplicaLoad& l : candidates) loads.append(py::cast(l));
    result = params_.is_none() ? call_(request, loads) : call_(request, loads, params_);
  } catch (py::error_already_set& e) {
    policy_->fail(e);
  }
  result = as_index(result);
  if (!PyLong_Check(result.ptr()) || PyBool_Check(result.ptr())) {
    policy_->fail(
        "expected the index of the chosen replica in the list of candidates (an int), "
        "got " +
        py::repr(result).cast<std::string>());
  }
  int overflow = 0;
  const long long index = PyLong_AsLongLongAndOverflow(result.ptr(), &overflow);
  if (overflow != 0 || index < 0 || index >= static_cast<long long>(candidates.size())) {
    policy_->fail("returned " + py::repr(result).cast<std::string>() +
                  ", expected an index into the " + std::to_string(candidates.size()) +
                  " candidate replicas (0 to " + std::to_string(candidates.size() - 1) + ")");
  }
  return static_cast<std::size_t>(index);
}

std::unique_ptr<Router> make_python_router(std::shared_ptr<const PythonPolicy> policy,
                                           py::object params, std::int32_t block_size) {
  py::object call = policy->fn();
  if (PyType_Check(call.ptr())) {
    try {
      call = call();
    } catch (py::error_already_set& e) {
      policy->fail(e);
    }
  }
  return std::make_unique<PythonRouter>(std::move(policy), std::move(call), std::move(params),
                                        block_size);
}

namespace {

// The hashes of the request's full prompt blocks (the chain the KV cache and the prefix-affinity
// router compute, core/block_hash.h), each as its low 64 bits.
py::tuple block_hashes(const RouteRequest& r) {
  const std::int32_t n = r.spec.prompt_len / r.block_size;
  py::tuple out(static_cast<std::size_t>(n));
  BlockHash parent = kNoneHash;
  for (std::int32_t b = 0; b < n; ++b) {
    parent = hash_block(parent, r.spec, b, r.block_size);
    out[static_cast<std::size_t>(b)] = py::int_(parent.lo);
  }
  return out;
}

}  // namespace

void bind_router_views(py::module_& m) {
  py::class_<RouteRequest>(m, "RouteRequest",
                           "What a Python router, admission rule or length cap sees of an "
                           "arriving request (a copy).")
      .def_property_readonly("id", [](const RouteRequest& r) { return r.spec.id; })
      .def_property_readonly("arrival_ns", [](const RouteRequest& r) { return r.spec.arrival_ns; })
      .def_property_readonly("prompt_tokens",
                             [](const RouteRequest& r) { return r.spec.prompt_len; })
      .def_property_readonly("max_output_tokens",
                             [](const RouteRequest& r) { return r.spec.max_output_tokens; })
      .def_property_readonly("priority", [](const RouteRequest& r) { return r.spec.priority; })
      .def_property_readonly("tenant", [](const RouteRequest& r) { return r.spec.tenant; })
      .def_property_readonly("request_class",
                             [](const RouteRequest& r) { return r.spec.request_class; })
      .def_property_readonly("session", [](const RouteRequest& r) { return r.spec.session; })
      .def_property_readonly("n", [](const RouteRequest& r) { return r.spec.n; })
      .def_property_readonly("block_size", [](const RouteRequest& r) { return r.block_size; })
      .def_property_readonly("block_hashes", &block_hashes,
                             "the hashes of the full prompt blocks, in order (equal hashes: "
                             "equal prefixes up to that block)")
      .def("__repr__", [](const RouteRequest& r) {
        return "<servelab.RouteRequest id=" + std::to_string(r.spec.id) +
               " prompt_tokens=" + std::to_string(r.spec.prompt_len) + ">";
      });
  py::class_<ReplicaLoad>(m, "ReplicaLoad", "A candidate replica's load at the decision's instant.")
      .def_readonly("replica", &ReplicaLoad::replica)
      .def_readonly("outstanding", &ReplicaLoad::outstanding)
      .def_readonly("waiting", &ReplicaLoad::waiting)
      .def_readonly("running", &ReplicaLoad::running)
      .def_readonly("kv_blocks_used", &ReplicaLoad::kv_blocks_used)
      .def_readonly("kv_blocks_usable", &ReplicaLoad::kv_blocks_usable)
      .def_property_readonly("kv_usage", &ReplicaLoad::kv_usage)
      .def("__repr__", [](const ReplicaLoad& l) {
        return "<servelab.ReplicaLoad replica=" + std::to_string(l.replica) +
               " outstanding=" + std::to_string(l.outstanding) +
               " waiting=" + std::to_string(l.waiting) + " running=" + std::to_string(l.running) +
               ">";
      });
}

}  // namespace servelab::python
