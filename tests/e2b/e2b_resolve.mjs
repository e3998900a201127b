// A module resolution hook for the E2B tests: the bare "e2b" that @e2b/code-interpreter imports resolves to the
// e2b SDK's ES module build, the same module sdk_test.mjs imports (one SDK instance: its error classes are
// the same). e2b's package has no "exports" map, so Node would otherwise take its CommonJS build, which Node 18
// (Debian's) cannot load. Registered by sdk_test.mjs (module.register, Node >= 18.19).
export async function resolve(specifier, context, next) {
  if (specifier === "e2b") {
    return { url: new URL("./node_modules/e2b/dist/index.mjs", import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
