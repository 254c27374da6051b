// rumor._rumor: the Python bindings (pybind11) of the module's peer (python_peer.hpp), plus the
// C++ dense models' fingerprint and loss/gradient, so tests can check that rumor.torch lays an
// equivalent nn.Sequential out exactly as rumor-peer does.
//
// The flat buffer is handed to Python zero-copy: Node supports the buffer protocol, and
// buffer()/begin_step()/end_step() return numpy arrays over the node's own memory that keep
// the node alive. Blocking calls release the GIL; nothing here is ever called from the I/O thread.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>

#include "core/knobs.hpp"
#include "core/model.hpp"
#include "net/address.hpp"
#include "python/python_peer.hpp"

namespace py = pybind11;
using rumor::python::Node;
using rumor::python::NodeOptions;

namespace {

py::array view_of(py::object owner, float* data, std::size_t n) {
  return py::array_t<float>({static_cast<py::ssize_t>(n)}, {static_cast<py::ssize_t>(sizeof(float))}, data, owner);
}

}  // namespace

PYBIND11_MODULE(_rumor, m) {
  m.doc() = "Rumor's peer runtime for Python (use the rumor package, not this module directly)";
  py::register_exception<rumor::python::WaitTimeout>(m, "WaitTimeout", PyExc_TimeoutError);
  py::register_exception<rumor::python::ForkedChild>(m, "ForkedChild", PyExc_RuntimeError);
  py::register_exception<rumor::python::Diverged>(m, "Diverged", PyExc_RuntimeError);
  py::register_exception<rumor::python::UnknownKnob>(m, "UnknownKnob", PyExc_TypeError);

  py::class_<Node>(m, "Node", py::buffer_protocol())
      .def(py::init([](std::string fingerprint, std::size_t size, std::string listen, std::vector<std::string> join,
                       std::string swarm_key, std::string metrics, std::int64_t seed, std::string log_level,
                       std::string name, std::map<std::string, std::string> knobs, std::string metrics_listen) {
             NodeOptions o;
             o.fingerprint = std::move(fingerprint);
             o.size = size;
             o.listen = std::move(listen);
             o.join = std::move(join);
             o.swarm_key_path = std::move(swarm_key);
             o.metrics_path = std::move(metrics);
             o.seed = seed;
             o.log_level = std::move(log_level);
             o.name = std::move(name);
             o.knobs.assign(knobs.begin(), knobs.end());
             o.metrics_listen = std::move(metrics_listen);
             py::gil_scoped_release release;  // binding, starting the I/O thread
             return std::make_unique<Node>(std::move(o));
           }),
           py::arg("fingerprint"), py::arg("size"), py::arg("listen") = "127.0.0.1:0",
           py::arg("join") = std::vector<std::string>{}, py::arg("swarm_key") = "", py::arg("metrics") = "",
           py::arg("seed") = -1, py::arg("log_level") = "warning", py::arg("name") = "",
           py::arg("knobs") = std::map<std::string, std::string>{}, py::arg("metrics_listen") = "")
      .def_buffer([](Node& n) {
        return py::buffer_info(n.data(), sizeof(float), py::format_descriptor<float>::format(), 1,
                               {static_cast<py::ssize_t>(n.size())}, {static_cast<py::ssize_t>(sizeof(float))});
      })
      .def("buffer", [](py::object self) {
        Node& n = self.cast<Node&>();
        return view_of(self, n.data(), n.size());
      })
      .def("address", &Node::address)
      .def("metrics_address", &Node::metrics_address)
      .def("fingerprint", &Node::fingerprint)
      .def("join",
           [](Node& n, double timeout) {
             rumor::python::JoinResult r;
             {
               py::gil_scoped_release release;
               r = n.join(timeout);
             }
             py::dict d;
             d["status"] = r.status;
             d["step"] = r.step;
             d["reason"] = r.reason;
             return d;
           })
      .def("begin_step",
           [](py::object self, double wait_timeout) -> py::object {
             Node& n = self.cast<Node&>();
             bool changed;
             {
               py::gil_scoped_release release;
               changed = n.begin_step(wait_timeout);
             }
             if (!changed) return py::none();
             return view_of(self, const_cast<float*>(n.delta().data()), n.delta().size());
           },
           py::arg("wait_timeout") = 60.0)
      .def("end_step",
           [](py::object self, double loss, double seconds, std::uint64_t samples, double wait_timeout) -> py::object {
             Node& n = self.cast<Node&>();
             bool changed;
             {
               py::gil_scoped_release release;
               changed = n.end_step(loss, seconds, samples, wait_timeout);
             }
             if (!changed) return py::none();
             return view_of(self, const_cast<float*>(n.delta().data()), n.delta().size());
           })
      .def("serve",
           [](py::object self, double seconds, double max_seconds) -> py::object {
             Node& n = self.cast<Node&>();
             bool changed;
             {
               py::gil_scoped_release release;
               changed = n.serve(seconds, max_seconds);
             }
             if (!changed) return py::none();
             return view_of(self, const_cast<float*>(n.delta().data()), n.delta().size());
           },
           py::arg("seconds") = -1.0, py::arg("max_seconds") = -1.0)
      .def("set_extra_state",
           [](Node& n, py::buffer blob) {
             const py::buffer_info b = blob.request();
             if (b.ndim != 1 || b.itemsize != 1 || b.strides[0] != 1)
               throw std::invalid_argument("extra state must be a contiguous bytes-like object");
             py::gil_scoped_release release;  // `blob` stays referenced meanwhile
             n.set_extra_state(static_cast<const std::uint8_t*>(b.ptr), static_cast<std::size_t>(b.size));
           },
           py::arg("blob"))
      .def("received_extra_state", [](Node& n) { return py::bytes(n.received_extra_state()); })
      .def("report", &Node::report, py::arg("test_acc"), py::arg("loss"), py::arg("epoch"))
      .def("model_copied", &Node::model_copied)
      .def("training_done", &Node::training_done)
      .def("stats", &Node::stats)
      .def("lr_scale", &Node::lr_scale)
      .def("close", &Node::close, py::arg("timeout"), py::call_guard<py::gil_scoped_release>())
      .def("closed", &Node::closed);

  // The loop's knobs (core/knobs.hpp), so that rumor.Peer takes, checks and documents exactly
  // what rumor-peer's flags and rumor-sim's keys do.
  m.def("knobs", [] {
    const rumor::LoopSettings defaults;
    py::list out;
    for (const rumor::Knob& k : rumor::loop_knobs()) {
      if (!(k.scope & rumor::Knob::kPython)) continue;
      py::dict d;
      d["name"] = k.name;
      d["flag"] = rumor::knob_flag(k);
      d["key"] = rumor::knob_key(k);
      d["default"] = k.default_text ? std::string(k.default_text) : rumor::knob_value(k, defaults);
      d["accepted"] = rumor::knob_range(k);
      d["help"] = k.help;
      out.append(d);
    }
    return out;
  });
  m.def("check_knob", [](const std::string& name, const std::string& value) {
    rumor::LoopSettings scratch;
    rumor::python::apply_knob(scratch, name, value);  // UnknownKnob: TypeError; bad value: ValueError
  });
  // All of a peer's knobs together: those that do not combine (rumor::knob_conflicts): ValueError.
  m.def("check_knobs", [](const std::map<std::string, std::string>& knobs) {
    rumor::LoopSettings scratch;
    for (const auto& [name, value] : knobs) rumor::python::apply_knob(scratch, name, value);
    if (const std::string why = rumor::knob_conflicts(scratch); !why.empty()) throw std::invalid_argument(why);
  });
  m.def("parse_host_port", [](const std::string& s, const std::string& what, bool allow_zero) {
    const rumor::net::HostPort hp = rumor::net::parse_host_port(s, what.c_str(), allow_zero);  // ValueError
    return py::make_tuple(hp.host, hp.port);
  });

  // The C++ dense models, for layout checks: fingerprint, and loss + gradient on a flat buffer.
  m.def("dense_fingerprint", [](const std::string& spec, std::size_t in, std::size_t out) {
    return rumor::make_model(spec, in, out)->fingerprint();
  });
  m.def(
      "dense_init",
      [](const std::string& spec, std::size_t in, std::size_t out, std::uint64_t seed, const std::string& init) {
        auto model = rumor::make_model(spec, in, out);
        py::array_t<float> p(static_cast<py::ssize_t>(model->param_count()));
        rumor::Rng rng(seed);  // as rumor-peer --init-seed and --init do
        model->init({p.mutable_data(), model->param_count()}, rng, rumor::parse_init_scheme(init));  // ValueError
        return p;
      },
      py::arg("spec"), py::arg("inputs"), py::arg("outputs"), py::arg("seed"), py::arg("init") = "he");
  m.def("dense_loss_and_grad",
        [](const std::string& spec, py::array_t<float, py::array::c_style | py::array::forcecast> params,
           py::array_t<float, py::array::c_style | py::array::forcecast> x,
           py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> labels, std::size_t classes) {
          if (x.ndim() != 2) throw std::invalid_argument("x must be rows x inputs");
          const std::size_t rows = x.shape(0), in = x.shape(1);
          if (static_cast<std::size_t>(labels.size()) != rows) throw std::invalid_argument("one label per row");
          auto model = rumor::make_model(spec, in, classes);
          if (static_cast<std::size_t>(params.size()) != model->param_count())
            throw std::invalid_argument("params: expected " + std::to_string(model->param_count()) + " values");
          py::array_t<float> grad(static_cast<py::ssize_t>(model->param_count()));
          const double loss = model->loss_and_grad({params.data(), model->param_count()}, x.data(), rows, labels.data(),
                                                   nullptr, {grad.mutable_data(), model->param_count()});
          return py::make_tuple(loss, grad);
        });
}
