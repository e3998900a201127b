// Files compiled into a binary (cmake/CorralEmbed.cmake writes the tables): web assets served with nothing on
// disk.
#pragma once

#include <cstring>
#include <string_view>

namespace corral::http {

struct EmbeddedFile {
  const char* path;  // relative to the embedded directory; nullptr ends a table
  std::string_view data;
};

// The file at `path` in `table`, or nullptr.
inline const EmbeddedFile* FindEmbedded(const EmbeddedFile* table, std::string_view path) {
  for (const EmbeddedFile* f = table; f->path != nullptr; ++f) {
    if (path == f->path) return f;
  }
  return nullptr;
}

// The Content-Type of a web asset by its extension (application/octet-stream when unknown).
inline const char* ContentTypeOf(std::string_view path) {
  auto ends = [&](std::string_view ext) {
    return path.size() >= ext.size() && path.substr(path.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

}  // namespace corral::http
