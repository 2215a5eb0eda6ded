// The policy registry from Python: the catalogue `sim policies` prints (as text and as data), and
// Python callables registered as plugins (python/python_queue_order.h, python_victim_rule.h,
// python_router.h, python_overload.h, python_batch_formation.h) that experiments then name like
// built-in ones. Registering a name again replaces the Python plugin of that name (a notebook cell
// run twice); a built-in name is refused.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "core/config_error.h"
#include "policies/registry.h"
#include "python/bindings.h"
#include "python/python_batch_formation.h"
#include "python/python_overload.h"
#include "python/python_plugins.h"
#include "python/python_policy.h"
#include "python/python_queue_order.h"
#include "python/python_router.h"
#include "python/python_victim_rule.h"
#include "python/request_view.h"

namespace py = pybind11;

namespace servelab::python {

namespace {

// Names registered from Python, per kind (changed and read with the GIL held).
std::map<PolicyKind, std::set<std::string>>& python_names() {
  static auto* names = new std::map<PolicyKind, std::set<std::string>>();  // never destroyed
  return *names;
}

py::object to_python(const ParamValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

py::dict params_dict(const PolicySpec& spec) {
  py::dict d;
  for (const auto& [name, value] : spec.params) d[py::str(name)] = to_python(value);
  return d;
}

// {name: default} or {name: (default, "doc")} -> ParamInfo, typed by the default.
std::vector<ParamInfo> parse_params(const std::string& plugin, const py::dict& params) {
  std::vector<ParamInfo> out;
  for (const auto& [key, value] : params) {
    ParamInfo p;
    if (!py::isinstance<py::str>(key)) {
      throw py::type_error("register '" + plugin + "': parameter names must be str, got " +
                           py::repr(key).cast<std::string>());
    }
    p.name = py::cast<std::string>(key);
    // `name` is the key that names the plugin in `{name: P, ...}`: a parameter of that name
    // could never be given (the plugin was registered and then unusable).
    if (p.name == "name" || p.name.empty()) {
      throw ConfigError("register '" + plugin + "': a parameter cannot be called '" + p.name +
                        "' (the key `name` names the plugin itself); choose another");
    }
    py::handle def = value;
    if (py::isinstance<py::tuple>(value)) {
      const auto t = py::reinterpret_borrow<py::tuple>(value);
      if (t.size() != 2 || !py::isinstance<py::str>(t[1])) {
        throw ConfigError("register '" + plugin + "': parameter '" + p.name +
                          "': expected a default value or (default, \"description\")");
      }
      def = t[0];
      p.doc = py::cast<std::string>(t[1]);
    }
    if (PyBool_Check(def.ptr())) {
      p.type = ParamType::kBool;
      p.def = py::cast<bool>(def);
    } else if (PyLong_Check(def.ptr())) {
      p.type = ParamType::kInt;
      p.def = py::cast<std::int64_t>(def);
    } else if (PyFloat_Check(def.ptr())) {
      p.type = ParamType::kDouble;
      p.def = py::cast<double>(def);
    } else if (py::isinstance<py::str>(def)) {
      p.type = ParamType::kString;
      p.def = py::cast<std::string>(def);
    } else {
      throw ConfigError("register '" + plugin + "': parameter '" + p.name +
                        "': expected a default of type bool, int, float or str, got " +
                        py::repr(def).cast<std::string>());
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string origin_of(const py::object& fn) {
  const std::string module = py::str(py::getattr(fn, "__module__", py::str("?")));
  const std::string name = py::str(py::getattr(fn, "__qualname__", py::repr(fn)));
  return "Python: " + module + "." + name;
}

// Adds (or replaces) the Python plugin `info.name` of `info.kind`.
void register_python_plugin(PluginInfo info) {
  if (info.name.empty()) throw ConfigError("register: the plugin name is empty");
  if (RegistryReaders::count() > 0) {
    throw std::runtime_error(
        "register: a run, compare or sweep is using the policy registry in another thread; "
        "register '" +
        info.name + "' before starting it or after it ends");
  }
  PolicyRegistry& registry = PolicyRegistry::mutable_instance();
  std::set<std::string>& mine = python_names()[info.kind];
  if (registry.find(info.kind, info.name) != nullptr) {
    if (!mine.count(info.name)) {
      throw ConfigError("register: '" + info.name + "' is a built-in " + to_string(info.kind) +
                        " plugin; choose another name");
    }
    registry.remove(info.kind, info.name);
  }
  mine.insert(info.name);
  info.rank = 1000;  // after the built-in plugins in listings
  registry.add(std::move(info));
}

// A Python plugin being registered: the PluginInfo fields every kind fills (the description, or
// "a <what> written in Python"; the origin; the declared parameters) and the PythonPolicy its
// objects share. The caller adds info.factory and passes info to register_python_plugin.
struct PythonPlugin {
  PluginInfo info;
  std::shared_ptr<const PythonPolicy> policy;
  bool with_params = false;
};

PythonPlugin python_plugin(PolicyKind kind, const std::string& what, const std::string& name,
                           py::function fn, const std::optional<py::dict>& params,
                           const std::string& description) {
  PythonPlugin p;
  p.info.kind = kind;
  p.info.name = name;
  const bool vowel = std::string_view("aeiou").find(what.front()) != std::string_view::npos;
  p.info.description =
      description.empty() ? (vowel ? "an " : "a ") + what + " written in Python" : description;
  p.info.origin = origin_of(fn);
  if (params) p.info.params = parse_params(name, *params);
  p.with_params = params.has_value();
  p.policy = std::make_shared<const PythonPolicy>(name, what, std::move(fn));
  return p;
}

// What a plugin's callable gets as its parameters: their values as a dict, or None when the
// plugin declares none. REQUIRES: the GIL.
py::object param_values(bool with_params, const PolicySpec& spec) {
  return with_params ? py::object(params_dict(spec)) : py::object(py::none());
}

void register_queue_order(const std::string& name, py::function fn, std::optional<py::dict> params,
                          const std::string& description) {
  PythonPlugin p =
      python_plugin(PolicyKind::kQueue, "queue order", name, std::move(fn), params, description);
  p.info.factory = [policy = p.policy, with = p.with_params](const PolicySpec& spec,
                                                             PolicyTarget& t) {
    t.scheduler->make_waiting_queue = [policy, spec, with]() -> std::unique_ptr<WaitingQueue> {
      py::gil_scoped_acquire gil;
      return std::make_unique<PythonQueueOrder>(policy, param_values(with, spec));
    };
  };
  register_python_plugin(std::move(p.info));
}

void register_victim_rule(const std::string& name, py::function fn,
                          const std::string& description) {
  PythonPlugin p = python_plugin(PolicyKind::kVictim, "victim rule", name, std::move(fn),
                                 std::nullopt, description);
  p.info.factory = [policy = p.policy](const PolicySpec&, PolicyTarget& t) {
    t.scheduler->victim = std::make_shared<const PythonVictimRule>(policy);
  };
  register_python_plugin(std::move(p.info));
}

void register_router(const std::string& name, py::function fn, std::optional<py::dict> params,
                     const std::string& description) {
  PythonPlugin p =
      python_plugin(PolicyKind::kRouter, "router", name, std::move(fn), params, description);
  p.info.factory = [policy = p.policy, with = p.with_params](const PolicySpec& spec,
                                                             PolicyTarget& t) {
    *t.router = [policy, spec, with](const RouterContext& ctx) -> std::unique_ptr<Router> {
      py::gil_scoped_acquire gil;
      return make_python_router(policy, param_values(with, spec), ctx.block_size);
    };
  };
  register_python_plugin(std::move(p.info));
}

// An admission rule (Made = PythonAdmission) or a length cap (PythonLengthCap), built once per
// experiment into the scheduler config.
template <class Made>
void register_overload(const std::string& name, py::function fn, std::optional<py::dict> params,
                       const std::string& description) {
  constexpr bool kAdmission = std::is_base_of_v<AdmissionPolicy, Made>;
  PythonPlugin p = python_plugin(kAdmission ? PolicyKind::kAdmission : PolicyKind::kLengthCap,
                                 kAdmission ? "admission rule" : "length cap", name, std::move(fn),
                                 params, description);
  p.info.factory = [policy = p.policy, with = p.with_params](const PolicySpec& spec,
                                                             PolicyTarget& t) {
    py::gil_scoped_acquire gil;
    auto made =
        std::make_shared<const Made>(policy, param_values(with, spec), t.scheduler->block_size);
    if constexpr (kAdmission) {
      t.scheduler->admission = std::move(made);
    } else {
      t.scheduler->length_cap = std::move(made);
    }
  };
  register_python_plugin(std::move(p.info));
}

void register_admission(const std::string& name, py::function fn, std::optional<py::dict> params,
                        const std::string& description) {
  register_overload<PythonAdmission>(name, std::move(fn), std::move(params), description);
}

void register_length_cap(const std::string& name, py::function fn, std::optional<py::dict> params,
                         const std::string& description) {
  register_overload<PythonLengthCap>(name, std::move(fn), std::move(params), description);
}

void register_batch_formation(const std::string& name, py::function fn,
                              std::optional<py::dict> params, const std::string& description,
                              bool resumes_swapped) {
  PythonPlugin p = python_plugin(PolicyKind::kBatch, "batch formation", name, std::move(fn), params,
                                 description);
  p.info.factory = [policy = p.policy, with = p.with_params, resumes_swapped](
                       const PolicySpec& spec, PolicyTarget& t) {
    py::gil_scoped_acquire gil;
    t.scheduler->batch = std::make_shared<const PythonBatchFormation>(
        policy, param_values(with, spec), resumes_swapped);
  };
  register_python_plugin(std::move(p.info));
}

py::list catalogue() {
  py::list out;
  std::vector<PolicyKind> kinds(std::begin(kAllPolicyKinds), std::end(kAllPolicyKinds));
  kinds.push_back(PolicyKind::kRouter);  // `sim policies` lists the routers last, too
  kinds.push_back(PolicyKind::kVictim);
  for (const PolicyKind kind : kinds) {
    for (const PluginInfo* p : PolicyRegistry::instance().list(kind)) {
      py::list params;
      for (const ParamInfo& q : p->params) {
        py::dict d;
        d["name"] = q.name;
        d["type"] = to_string(q.type);
        d["default"] = to_python(q.def);
        if (q.type == ParamType::kInt || q.type == ParamType::kDouble) {
          d["min"] = q.min;
          d["max"] = q.max;
        }
        if (!q.choices.empty()) d["choices"] = q.choices;
        if (q.plugin_of) d["plugin_of"] = to_string(*q.plugin_of);
        d["doc"] = q.doc;
        params.append(d);
      }
      py::dict d;
      d["kind"] = to_string(kind);
      d["name"] = p->name;
      d["description"] = p->description;
      d["origin"] = p->origin;
      d["params"] = params;
      d["python"] = python_names()[kind].count(p->name) > 0;
      out.append(d);
    }
  }
  return out;
}

}  // namespace

bool uses_python_policy(const ExperimentConfig& config) {
  const auto& names = python_names();
  const auto has = [&](PolicyKind kind, const std::string& name) {
    const auto it = names.find(kind);
    return it != names.end() && it->second.count(name) > 0;
  };
  if (has(PolicyKind::kBatch, config.policies.batch.name) ||
      has(PolicyKind::kQueue, config.policies.queue.name) ||
      has(PolicyKind::kAdmission, config.policies.admission.name) ||
      has(PolicyKind::kLengthCap, config.policies.length_cap.name))
    return true;
  if (config.cluster.set) {
    if (has(PolicyKind::kRouter, config.cluster.router.name)) return true;
    if (config.cluster.decode_router &&
        has(PolicyKind::kRouter, config.cluster.decode_router->name))
      return true;
  }
  const auto victim = config.policies.preemption.params.find("victim");
  return victim != config.policies.preemption.params.end() &&
         std::holds_alternative<std::string>(victim->second) &&
         has(PolicyKind::kVictim, std::get<std::string>(victim->second));
}

bool python_plugins_registered() {
  for (const auto& [kind, names] : python_names()) {
    if (!names.empty()) return true;
  }
  return false;
}

namespace {
int registry_readers = 0;  // guarded by the GIL
}  // namespace

RegistryReaders::RegistryReaders() { ++registry_readers; }
RegistryReaders::~RegistryReaders() { --registry_readers; }
int RegistryReaders::count() { return registry_readers; }

void bind_policies(py::module_& m) {
  bind_request_view(m);
  m.def("policies", &catalogue,
        "Every policy plugin (built-in and registered from Python) with its kind, name, "
        "description, origin and parameters, in `sim policies` order.");
  m.def("policies_text", &format_catalogue, "The catalogue exactly as `sim policies` prints it.");
  m.def("register_queue_order", &register_queue_order, py::arg("name"), py::arg("key"),
        py::arg("params") = py::none(), py::arg("description") = "");
  m.def("register_victim_rule", &register_victim_rule, py::arg("name"), py::arg("pick"),
        py::arg("description") = "");
  bind_router_views(m);
  m.def("register_router", &register_router, py::arg("name"), py::arg("route"),
        py::arg("params") = py::none(), py::arg("description") = "");
  bind_step_builder(m);
  m.def("register_batch_formation", &register_batch_formation, py::arg("name"), py::arg("fill"),
        py::arg("params") = py::none(), py::arg("description") = "",
        py::arg("resumes_swapped") = false);
  bind_admission_load(m);
  m.def("register_admission", &register_admission, py::arg("name"), py::arg("admit"),
        py::arg("params") = py::none(), py::arg("description") = "");
  m.def("register_length_cap", &register_length_cap, py::arg("name"), py::arg("cap"),
        py::arg("params") = py::none(), py::arg("description") = "");
}

}  // namespace servelab::python
