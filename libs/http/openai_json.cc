#include "libs/http/openai_json.h"

#include "boost/json.hpp"

namespace corral::http {

std::string StringOf(const boost::json::value* v) {
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

std::string ErrorJson(absl::string_view message, absl::string_view type, absl::string_view code) {
  boost::json::object error;
  error["message"] = boost::json::string_view(message.data(), message.size());
  error["type"] = boost::json::string_view(type.data(), type.size());
  error["param"] = nullptr;
  if (code.empty()) {
    error["code"] = nullptr;
  } else {
    error["code"] = boost::json::string_view(code.data(), code.size());
  }
  boost::json::object body;
  body["error"] = std::move(error);
  return boost::json::serialize(body);
}

std::string ModelListJson(const std::vector<std::string>& ids, absl::string_view owned_by) {
  boost::json::array data;
  for (const auto& id : ids) {
    boost::json::object model;
    model["id"] = id;
    model["object"] = "model";
    model["owned_by"] = boost::json::string_view(owned_by.data(), owned_by.size());
    data.push_back(std::move(model));
  }
  boost::json::object out;
  out["object"] = "list";
  out["data"] = std::move(data);
  return boost::json::serialize(out);
}

std::vector<std::string> ModelIds(absl::string_view body) {
  std::vector<std::string> ids;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(boost::json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) return ids;
  auto* data = v.as_object().if_contains("data");
  if (data == nullptr || !data->is_array()) return ids;
  for (const auto& m : data->as_array()) {
    if (!m.is_object()) continue;
    std::string id = StringOf(m.as_object().if_contains("id"));
    if (!id.empty()) ids.push_back(std::move(id));
  }
  return ids;
}

}  // namespace corral::http
