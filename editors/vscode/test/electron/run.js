'use strict';
// Opt-in real-editor test (not run in CI: it needs a VS Code binary, which CI cannot download).
//   VSCODE_EXECUTABLE=/path/to/code npm run test:electron
// Opens the repository's examples/ folder in a fresh VS Code with this extension, opens a broken
// candidate, saves it, and waits for the cudice diagnostic (see suite/index.js). The server must
// be installed (cudice-lsp on PATH, or CUDICE_PYTHON=/path/to/python).
const path = require('path');
const { runTests } = require('@vscode/test-electron');

async function main() {
  const vscodeExecutablePath = process.env.VSCODE_EXECUTABLE;
  if (!vscodeExecutablePath) {
    console.error('Set VSCODE_EXECUTABLE to a VS Code binary (>= 1.82), e.g. /usr/share/code/code. ' +
      'This test never downloads VS Code.');
    process.exit(2);
  }
  const extensionDevelopmentPath = path.resolve(__dirname, '..', '..');
  const examples = path.resolve(extensionDevelopmentPath, '..', '..', 'examples');
  await runTests({
    vscodeExecutablePath,
    extensionDevelopmentPath,
    extensionTestsPath: path.resolve(__dirname, 'suite', 'index.js'),
    launchArgs: [examples, '--disable-extensions'],
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
