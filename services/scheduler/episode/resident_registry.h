// The processes an attempt keeps open in its sandbox (persistent tools, MCP servers over stdio, the environment
// relay), by key: found again by it, stopped and forgotten when one fails, all stopped when the attempt ends.
// Plain data, part of Attempt; starting one is resident_process.h.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "services/sandbox_host/client/host_api.h"

namespace corral::scheduler {

// An attempt's resident processes, by key. Keys: a persistent tool's name, "mcp:<server>", "env:relay" (tool
// names cannot hold ':'). Used by one coroutine at a time.
class ResidentProcesses {
 public:
  struct Entry {
    std::shared_ptr<sandbox::InteractiveProcess> process;
    std::string marker;       // what the process prints after each answer ("\n" for a line protocol)
    bool fork_ready = false;  // a fork carries it into each child (Command.fork_ready)
  };
  // The process under `key`, or nullptr.
  const Entry* Find(const std::string& key) const {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : &it->second;
  }
  void Put(const std::string& key, Entry entry) { by_key_[key] = std::move(entry); }
  // Ends the process under `key` (if any) and forgets it.
  void Stop(const std::string& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return;
    it->second.process->Stop();
    by_key_.erase(it);
  }
  // Forgets the process under `key` without ending it (it ended by itself).
  void Forget(const std::string& key) { by_key_.erase(key); }
  // Ends every process (the sandbox's deletion would kill them too).
  void StopAll() {
    for (auto& [key, entry] : by_key_) entry.process->Stop();
    by_key_.clear();
  }
  // Before a fork: ends every process a fork does not carry; those it does, by key.
  std::map<std::string, Entry> StopAllButForkReady() {
    std::map<std::string, Entry> kept;
    for (auto& [key, entry] : by_key_) {
      if (entry.fork_ready) {
        kept.emplace(key, entry);
      } else {
        entry.process->Stop();
      }
    }
    by_key_ = kept;
    return kept;
  }
  bool empty() const { return by_key_.empty(); }

 private:
  std::map<std::string, Entry> by_key_;
};

}  // namespace corral::scheduler
