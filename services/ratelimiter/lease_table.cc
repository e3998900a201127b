#include "services/ratelimiter/limiter_internal.h"

namespace corral::ratelimiter {

internal::Lease* internal::LeaseTable::Find(const std::string& id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : it->second.get();
}

internal::Lease& internal::LeaseTable::Add(std::unique_ptr<Lease> lease) {
  Lease& added = *lease;
  leases_.emplace(added.id, std::move(lease));
  return added;
}

std::unique_ptr<internal::Lease> internal::LeaseTable::Remove(const std::string& id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return nullptr;
  std::unique_ptr<Lease> lease = std::move(it->second);
  leases_.erase(it);
  if (!lease->request_id.empty()) request_ids_.erase(lease->request_id);
  return lease;
}

void internal::LeaseTable::BindRequest(const std::string& request_id, Lease& lease) {
  request_ids_[request_id] = lease.id;
  lease.request_id = request_id;
}

const internal::Lease* internal::LeaseTable::ForRequest(const std::string& request_id) const {
  auto it = request_ids_.find(request_id);
  return it == request_ids_.end() ? nullptr : Find(it->second);
}

void internal::LeaseTable::RememberEnded(const std::string& id, std::string why) {
  if (ended_.insert_or_assign(id, std::move(why)).second) ended_order_.push_back(id);
  while (ended_order_.size() > internal::kEndedMemory) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

const std::string* internal::LeaseTable::EndedWhy(const std::string& id) const {
  auto it = ended_.find(id);
  return it == ended_.end() ? nullptr : &it->second;
}

std::vector<std::string> internal::LeaseTable::IdsOf(const Limit& limit) const {
  std::vector<std::string> ids;
  for (const auto& [id, lease] : leases_) {
    if (lease->instance->limit == &limit) ids.push_back(id);
  }
  return ids;
}

}  // namespace corral::ratelimiter
