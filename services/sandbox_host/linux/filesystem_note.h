// What the host can tell an operator about the filesystem its sandboxes live on, before it is slow for them.
// ext4 without a journal (a common VM image) skips, each time it allocates an inode, every inode of the group
// freed in the last minute or so, reading each one's block to learn when it was freed. A host creates and removes
// a few dozen files and directories per sandbox (homes, layers, overlay work directories, what the agent
// writes), so its creates, forks and deletes slow down with its own churn: 2-3x measured (docs/performance.md).
#pragma once

#include <sys/types.h>

#include <string>

namespace corral::sandbox {

// Whether device `dev` is an ext4 filesystem mounted without a journal, read from `sysfs`
// (<sysfs>/dev/block/MAJOR:MINOR names the device, <sysfs>/fs/ext4/NAME/journal_task is "<none>").
bool Ext4WithoutJournal(dev_t dev, const std::string& sysfs = "/sys");

// A warning for the filesystem holding `dir`, or "" when nothing is known against it.
std::string SlowFilesystemNote(const std::string& dir);

}  // namespace corral::sandbox
