#include "services/sandbox_host/convert.h"

#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>

namespace corral::sandbox {

v1::NetworkPolicy ToProto(NetworkPolicy policy) {
  switch (policy) {
    case NetworkPolicy::kOpen: return v1::NETWORK_POLICY_OPEN;
    case NetworkPolicy::kProxyOnly: return v1::NETWORK_POLICY_PROXY_ONLY;
    case NetworkPolicy::kNone: return v1::NETWORK_POLICY_NONE;
  }
  return v1::NETWORK_POLICY_UNSPECIFIED;
}

absl::StatusOr<SandboxSpec> FromProto(const v1::SandboxSpec& p) {
  SandboxSpec s;
  switch (p.network_policy()) {
    case v1::NETWORK_POLICY_OPEN: s.network = NetworkPolicy::kOpen; break;
    case v1::NETWORK_POLICY_PROXY_ONLY: s.network = NetworkPolicy::kProxyOnly; break;
    case v1::NETWORK_POLICY_NONE: s.network = NetworkPolicy::kNone; break;
    case v1::NETWORK_POLICY_UNSPECIFIED: break;
    default: return absl::InvalidArgumentError("unknown network_policy");
  }
  for (uint32_t port : p.allowed_ports()) {
    if (port == 0 || port > 65535) return absl::InvalidArgumentError("allowed_ports must be 1-65535");
    s.allowed_ports.push_back(static_cast<uint16_t>(port));
  }
  const v1::ResourceLimits& l = p.limits();
  s.cgroup.memory_bytes = l.memory_bytes();
  s.cgroup.max_pids = l.max_pids();
  s.cgroup.cpu_weight = l.cpu_weight();
  // Values above INT64_MAX would wrap: reject them as the absurd values they are.
  for (uint64_t v : {l.address_space_bytes(), l.max_file_size_bytes(), l.disk_bytes()}) {
    if (v > static_cast<uint64_t>(INT64_MAX)) return absl::InvalidArgumentError("a resource limit is out of range");
  }
  s.rlimits.nproc = l.max_processes();
  s.rlimits.address_space_bytes = static_cast<int64_t>(l.address_space_bytes());
  s.rlimits.nofile = l.max_open_files();
  s.rlimits.file_size_bytes = static_cast<int64_t>(l.max_file_size_bytes());
  s.disk_bytes = static_cast<int64_t>(l.disk_bytes());
  if (l.has_cpu_time()) {
    absl::Duration cpu = FromProto(l.cpu_time());
    if (cpu < absl::ZeroDuration()) return absl::InvalidArgumentError("cpu_time must not be negative");
    s.rlimits.cpu_seconds = absl::ToInt64Seconds(absl::Ceil(cpu, absl::Seconds(1)));
  }
  s.rlimits.core_dumps = l.has_core_file_bytes() && l.core_file_bytes() > 0;
  s.env = {p.env().begin(), p.env().end()};
  s.task_paths = {p.task_paths().begin(), p.task_paths().end()};
  if (p.has_idle_timeout()) {
    s.idle_timeout = FromProto(p.idle_timeout());
    if (s.idle_timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("idle_timeout must be above 0");
  }
  s.require_private_view = p.require_private_filesystem_view();
  s.labels = {p.labels().begin(), p.labels().end()};
  s.template_key = p.template_key();
  s.image = p.image();
  return s;
}

void ToProto(const SandboxSpec& s, v1::SandboxSpec* out) {
  out->set_template_key(s.template_key);
  out->set_image(s.image);
  if (s.network) out->set_network_policy(ToProto(*s.network));
  for (uint16_t port : s.allowed_ports) out->add_allowed_ports(port);
  ToProto(s.cgroup, s.rlimits, s.disk_bytes, out->mutable_limits());
  for (const auto& [k, v] : s.env) (*out->mutable_env())[k] = v;
  for (const auto& p : s.task_paths) out->add_task_paths(p);
  ToProto(s.idle_timeout, out->mutable_idle_timeout());
  out->set_require_private_filesystem_view(s.require_private_view);
  for (const auto& [k, v] : s.labels) (*out->mutable_labels())[k] = v;
}

void ToProto(const CgroupLimits& cgroup, const Rlimits& rlimits, int64_t disk_bytes, v1::ResourceLimits* l) {
  l->set_memory_bytes(cgroup.memory_bytes);
  l->set_max_pids(cgroup.max_pids);
  l->set_cpu_weight(cgroup.cpu_weight);
  l->set_max_processes(static_cast<uint32_t>(rlimits.nproc));
  l->set_address_space_bytes(static_cast<uint64_t>(rlimits.address_space_bytes));
  l->set_max_open_files(static_cast<uint32_t>(rlimits.nofile));
  l->set_max_file_size_bytes(static_cast<uint64_t>(rlimits.file_size_bytes));
  l->set_disk_bytes(static_cast<uint64_t>(disk_bytes));
  if (rlimits.cpu_seconds > 0) ToProto(absl::Seconds(rlimits.cpu_seconds), l->mutable_cpu_time());
  l->set_core_file_bytes(rlimits.core_dumps ? 1 : 0);
}

void ToProto(const Sandbox& sb, size_t running_processes, v1::Sandbox* out) {
  out->set_sandbox_id(sb.id);
  out->set_state(sb.deleted  ? v1::SANDBOX_STATE_DELETING
                 : sb.paused ? v1::SANDBOX_STATE_PAUSED
                             : v1::SANDBOX_STATE_READY);
  ToProto(sb.spec, out->mutable_spec());
  out->set_home(sb.home);
  out->set_image_digest(sb.image_digest());
  out->set_forked_from(sb.forked_from);
  out->set_fork_layers(sb.layers != nullptr ? static_cast<uint32_t>(sb.layers->depth) : 0);
  out->set_uid(sb.uid);
  const Protections& p = sb.protections;
  v1::Protections* pp = out->mutable_protections();
  pp->set_landlock_abi(p.landlock_abi);
  pp->set_no_new_privs(true);
  pp->set_cgroup(p.cgroup == CgroupMode::kV2   ? v1::CGROUP_VERSION_V2
                 : p.cgroup == CgroupMode::kV1 ? v1::CGROUP_VERSION_V1
                                               : v1::CGROUP_VERSION_UNSPECIFIED);
  for (const auto& c : p.cgroup_controllers) pp->add_cgroup_controllers(c);
  pp->set_mount_namespace(p.mount_namespace);
  pp->set_hidepid(p.hidepid);
  pp->set_network_namespace(p.network_namespace);
  pp->set_network_policy(ToProto(p.network));
  pp->set_tcp_bind_denied(p.tcp_bind_denied);
  pp->set_abstract_unix_sockets_scoped(p.scoped);
  pp->set_signals_scoped(p.scoped);
  pp->set_private_filesystem_view(p.mount_namespace);
  pp->set_memory_rlimit_bytes(static_cast<uint64_t>(p.memory_rlimit_bytes));
  pp->set_process_rlimit(static_cast<uint32_t>(p.process_rlimit));
  pp->set_containment(p.containment);
  pp->set_user_namespace(p.user_namespace);
  pp->set_user_ids(p.user_ids);
  pp->set_disk_quota_bytes(static_cast<uint64_t>(p.disk_quota_bytes));
  ToProto(sb.create_time, out->mutable_create_time());
  out->set_running_processes(static_cast<uint32_t>(running_processes));
}

void ToProto(const SandboxUsage& usage, v1::ResourceUsage* out) {
  const CgroupUsage& u = usage.metered.cgroup;
  if (u.cpu_usec >= 0 && u.memory_bytes >= 0) {
    out->set_measured(true);
    out->set_memory_bytes(static_cast<uint64_t>(u.memory_bytes));
    const int64_t host_memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    out->set_memory_limit_bytes(static_cast<uint64_t>(u.memory_limit_bytes > 0 ? u.memory_limit_bytes : host_memory));
    out->set_cpu_count(static_cast<uint32_t>(std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 1)));
    out->set_pids(static_cast<uint32_t>(std::max<int64_t>(u.pids, 0)));
  }
  if (u.cpu_usec >= 0) ToProto(absl::Microseconds(u.cpu_usec), out->mutable_cpu_time());
  if (u.cpu_user_usec >= 0) ToProto(absl::Microseconds(u.cpu_user_usec), out->mutable_cpu_user_time());
  if (u.cpu_system_usec >= 0) ToProto(absl::Microseconds(u.cpu_system_usec), out->mutable_cpu_system_time());
  if (u.io_write_bytes >= 0) out->set_disk_written_bytes(static_cast<uint64_t>(u.io_write_bytes));
  const MeteredUsage& m = usage.metered;
  if (m.memory_peak_bytes >= 0) out->set_memory_peak_bytes(static_cast<uint64_t>(m.memory_peak_bytes));
  if (m.memory_gib_seconds >= 0) out->set_memory_gib_seconds(m.memory_gib_seconds);
  if (m.disk_gib_seconds >= 0) out->set_disk_gib_seconds(m.disk_gib_seconds);
  out->set_processes_started(static_cast<uint32_t>(m.processes_started));
  ToProto(m.busy, out->mutable_busy_time());
  ToProto(usage.wall, out->mutable_wall_time());
  if (usage.quota_bytes >= 0) {
    out->set_disk_total_bytes(static_cast<uint64_t>(usage.quota_bytes));
    out->set_disk_used_bytes(static_cast<uint64_t>(usage.quota_used_bytes));
  }
  if (usage.own_disk_bytes >= 0) out->set_own_disk_bytes(static_cast<uint64_t>(usage.own_disk_bytes));
  if (usage.shared_disk_bytes >= 0) out->set_shared_disk_bytes(static_cast<uint64_t>(usage.shared_disk_bytes));
  for (const UsageSample& s : usage.samples) {
    v1::UsageSample* p = out->add_samples();
    ToProto(s.time, p->mutable_time());
    if (s.cpu_usec >= 0) ToProto(absl::Microseconds(s.cpu_usec), p->mutable_cpu_time());
    if (s.memory_bytes >= 0) p->set_memory_bytes(static_cast<uint64_t>(s.memory_bytes));
    if (s.disk_used_bytes >= 0) p->set_disk_used_bytes(static_cast<uint64_t>(s.disk_used_bytes));
  }
}

void ToProto(const ExitInfo& x, v1::ExitStatus* out) {
  out->set_exit_code(x.exit_code);
  out->set_signal(x.signal);
  out->set_timed_out(x.timed_out);
  ToProto(x.duration, out->mutable_duration());
  switch (x.reason) {
    case ExitReason::kExited: out->set_reason(v1::EXIT_REASON_EXITED); break;
    case ExitReason::kSignaled: out->set_reason(v1::EXIT_REASON_SIGNALED); break;
    case ExitReason::kTimedOut: out->set_reason(v1::EXIT_REASON_TIMED_OUT); break;
    case ExitReason::kKilled: out->set_reason(v1::EXIT_REASON_KILLED); break;
    case ExitReason::kSandboxDeleted: out->set_reason(v1::EXIT_REASON_SANDBOX_DELETED); break;
    case ExitReason::kCallEnded: out->set_reason(v1::EXIT_REASON_CALL_ENDED); break;
  }
  out->set_stdout_bytes(x.stdout_bytes);
  out->set_stderr_bytes(x.stderr_bytes);
  out->set_dropped_output_bytes(x.dropped_bytes);
  ToProto(x.end_time, out->mutable_end_time());
}

void ToProto(const struct stat& st, const std::string& path, const std::string& name, const std::string& link_target,
             v1::FileInfo* out) {
  out->set_path(path);
  out->set_name(name);
  out->set_type(S_ISREG(st.st_mode)   ? v1::FILE_TYPE_REGULAR
                : S_ISDIR(st.st_mode) ? v1::FILE_TYPE_DIRECTORY
                : S_ISLNK(st.st_mode) ? v1::FILE_TYPE_SYMLINK
                                      : v1::FILE_TYPE_OTHER);
  out->set_size(static_cast<uint64_t>(st.st_size));
  out->set_permissions(st.st_mode & 07777);
  ToProto(absl::TimeFromTimespec(st.st_mtim), out->mutable_modify_time());
  out->set_link_target(link_target);
}

void ToProto(const ProcessInfo& p, v1::Process* out) {
  out->set_process_id(p.id);
  out->set_pid(p.pid);
  out->set_kind(p.kind == ProcessKind::kExec          ? v1::PROCESS_KIND_EXEC
                : p.kind == ProcessKind::kInteractive ? v1::PROCESS_KIND_INTERACTIVE
                                                      : v1::PROCESS_KIND_BACKGROUND);
  out->set_state(p.exit ? v1::PROCESS_STATE_EXITED : v1::PROCESS_STATE_RUNNING);
  for (const auto& a : p.argv) out->add_argv(a);
  ToProto(p.start_time, out->mutable_start_time());
  if (p.exit) ToProto(*p.exit, out->mutable_exit_status());
  out->set_output_path(p.output_path);
  out->set_copy_of(p.copy_of);
}

void ToProto(const TemplateInfo& t, v1::Template* out) {
  out->set_key(t.key);
  out->set_state(t.state == TemplateState::kReady ? v1::TEMPLATE_STATE_READY : v1::TEMPLATE_STATE_BUILDING);
  out->set_content_digest(t.digest);
  out->set_size_bytes(t.size_bytes);
  out->set_clone_method(t.method == CloneMethod::kReflink ? v1::CLONE_METHOD_REFLINK : v1::CLONE_METHOD_COPY);
  out->set_sandboxes(static_cast<uint32_t>(std::max(0, t.sandboxes)));
  ToProto(t.create_time, out->mutable_create_time());
  ToProto(t.build_duration, out->mutable_build_duration());
  ToProto(t.last_used, out->mutable_last_used_time());
  out->set_image_digest(t.image_digest);
}

void ToProto(const Image& image, v1::Image* out) {
  out->set_digest(image.digest);
  for (const std::string& r : image.refs) out->add_refs(r);
  for (const std::string& l : image.layers) out->add_layers(l);
  out->set_size_bytes(image.size_bytes);
  ToProto(image.imported, out->mutable_import_time());
  v1::ImageConfig* c = out->mutable_config();
  for (const std::string& e : image.config.env) c->add_env(e);
  c->set_working_dir(image.config.working_dir);
  c->set_user(image.config.user);
  for (const std::string& e : image.config.entrypoint) c->add_entrypoint(e);
  for (const std::string& e : image.config.cmd) c->add_cmd(e);
}

}  // namespace corral::sandbox
