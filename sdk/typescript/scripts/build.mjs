// The package's build: compile src/ with tsc into dist/ and copy the repository's
// proto/ into dist/proto (the library loads its stubs from them, so they always match
// the checkout that was built). `npm install ./sdk/typescript` links this folder and runs
// `prepare` here without installing its dev dependencies first, so the build installs
// them itself when they are missing.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: "inherit" });

if (!existsSync(join(root, "node_modules", "typescript", "bin", "tsc"))) {
  run("npm", ["install", "--ignore-scripts", "--no-audit", "--no-fund", "--silent"]);
}
run(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"]);
const protos = join(root, "..", "..", "proto");
if (existsSync(protos)) {
  cpSync(protos, join(root, "dist", "proto"), { recursive: true });
} else if (!existsSync(join(root, "dist", "proto"))) {
  throw new Error(`no protos at ${protos}`);
}
