'use strict';
// Makes `require('vscode')` resolve to the stub, as VS Code's extension host would resolve it
// to the real API. Required first by every unit test file.
const Module = require('module');
const path = require('path');

const stubPath = path.join(__dirname, 'vscode.js');
const original = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'vscode') return stubPath;
  return original.call(this, request, ...rest);
};
