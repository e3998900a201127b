// Validates Kubernetes manifests (multi-document YAML files, e.g. `kubectl kustomize` output) against the API
// schemas of kubernetes-models; the Prometheus Operator's ServiceMonitor against its CRD schema.
//   node validate.mjs [--json OUT] FILE...   prints one line per object, exits 1 if any object is invalid or
//                                            unknown; --json also writes the objects, as a JSON array, to OUT
import { readFileSync, writeFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

async function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const candidates = group === "monitoring.coreos.com"
    ? [`@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`]
    : [`kubernetes-models/${group ? group + "/" : ""}${version}/${kind}`];
  for (const path of candidates) {
    try {
      const mod = await import(path);
      return mod[kind];
    } catch (e) {
      if (e.code !== "ERR_MODULE_NOT_FOUND" && e.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw e;
    }
  }
  return undefined;
}

let failures = 0;
const args = process.argv.slice(2);
const jsonOut = args[0] === "--json" ? args.splice(0, 2)[1] : null;
const objects = [];
for (const file of args) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    if (doc.errors.length) {
      console.log(`INVALID ${file}: YAML: ${doc.errors[0].message}`);
      failures++;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null) continue;
    objects.push(structuredClone(obj));
    const name = `${obj.kind}/${obj.metadata?.name}`;
    // kustomize folds long base64 values over several lines; the API server's base64 decoding skips newlines,
    // the schema's "byte" format does not.
    if (obj.kind === "Secret" && obj.data) {
      for (const k of Object.keys(obj.data)) obj.data[k] = String(obj.data[k]).replace(/\s+/g, "");
    }
    const Model = await modelFor(obj.apiVersion ?? "", obj.kind ?? "");
    if (!Model) {
      console.log(`INVALID ${name}: no schema for apiVersion ${obj.apiVersion} kind ${obj.kind}`);
      failures++;
      continue;
    }
    try {
      new Model(obj).validate();
      console.log(`valid   ${name} (${obj.apiVersion})`);
    } catch (e) {
      console.log(`INVALID ${name}: ${e.message}`);
      failures++;
    }
  }
}
if (jsonOut) writeFileSync(jsonOut, JSON.stringify(objects, null, 1));
process.exit(failures ? 1 : 0);
