'use strict';
// A stub of the `vscode` module, just wide enough for the extension's own code. Tests drive it
// through `stub.state` (settings, answers to message boxes, the active editor) and read what
// the extension did (registered commands, messages shown, status-bar text, output lines).

const state = {
  settings: {},
  answers: {}, // message text prefix -> button to "click"
  messages: [], // {level, text, items}
  commands: new Map(),
  executed: [],
  statusItems: [],
  outputs: [],
  configListeners: [],
  activeTextEditor: undefined,
};

function reset() {
  state.settings = {};
  state.answers = {};
  state.messages = [];
  state.commands = new Map();
  state.executed = [];
  state.statusItems = [];
  state.outputs = [];
  state.configListeners = [];
  state.activeTextEditor = undefined;
}

const disposable = (fn = () => {}) => ({ dispose: fn });

function message(level) {
  return (text, ...items) => {
    state.messages.push({ level, text, items });
    const key = Object.keys(state.answers).find((k) => text.startsWith(k));
    return Promise.resolve(key ? state.answers[key] : undefined);
  };
}

class ThemeColor {
  constructor(id) {
    this.id = id;
  }
}

class EventEmitter {
  constructor() {
    this.listeners = [];
    this.event = (l) => (this.listeners.push(l), disposable());
  }
  fire(v) {
    this.listeners.forEach((l) => l(v));
  }
  dispose() {}
}

class Disposable {
  constructor(fn) {
    this.fn = fn;
  }
  static from(...ds) {
    return new Disposable(() => ds.forEach((d) => d.dispose()));
  }
  dispose() {
    if (this.fn) this.fn();
  }
}

const api = {
  stub: { state, reset, fireConfigChange: (keys) => Promise.all(state.configListeners.map((l) =>
    l({ affectsConfiguration: (s) => keys.some((k) => k === s || k.startsWith(s + '.')) }))) },
  version: '1.82.0',
  env: { appName: 'vscode-stub', language: 'en', machineId: 'stub', sessionId: 'stub', uiKind: 1 },
  StatusBarAlignment: { Left: 1, Right: 2 },
  ThemeColor,
  EventEmitter,
  Disposable,
  window: {
    createOutputChannel(name) {
      const ch = { name, lines: [], shown: 0, appendLine: (l) => ch.lines.push(l), append: (t) => ch.lines.push(t),
        show: () => ch.shown++, dispose() {} };
      state.outputs.push(ch);
      return ch;
    },
    createStatusBarItem() {
      const item = { text: '', tooltip: undefined, command: undefined, backgroundColor: undefined, visible: false,
        show() { item.visible = true; }, hide() { item.visible = false; }, dispose() {} };
      state.statusItems.push(item);
      return item;
    },
    showErrorMessage: message('error'),
    showWarningMessage: message('warning'),
    showInformationMessage: message('info'),
    get activeTextEditor() {
      return state.activeTextEditor;
    },
  },
  commands: {
    registerCommand(id, fn) {
      if (state.commands.has(id)) throw new Error(`command '${id}' already exists`);
      state.commands.set(id, fn);
      return disposable(() => state.commands.delete(id));
    },
    executeCommand(id, ...args) {
      state.executed.push({ id, args });
      const fn = state.commands.get(id);
      return Promise.resolve(fn ? fn(...args) : undefined);
    },
  },
  workspace: {
    workspaceFolders: undefined,
    textDocuments: [],
    notebookDocuments: [],
    getConfiguration() {
      return { get: (key, dflt) => (key in state.settings ? state.settings[key] : dflt) };
    },
    onDidChangeConfiguration(listener) {
      state.configListeners.push(listener);
      return disposable();
    },
  },
};

// vscode-languageclient subclasses many API classes at load time (CodeLens, CompletionItem …):
// any name the stub lacks is a plain placeholder class, so the real client library loads.
const placeholders = new Map();
const chain = new Proxy(function inert() {}, {
  get: (t, n) => (n === Symbol.toPrimitive ? () => 'inert' : n === 'toJSON' ? () => null : n in t ? t[n] : chain),
  apply: () => chain,
  construct: () => chain,
});
// Namespaces (`workspace`, `languages`, `notebooks` …): members the stub lacks are functions
// that register nothing and return a disposable (event subscriptions, providers).
const noop = () => disposable();
function lenient(obj) {
  return new Proxy(obj, { get: (t, n) => (n in t || typeof n !== 'string' ? t[n] : noop) });
}
const namespaces = new Map();
function namespace(name) {
  if (!namespaces.has(name)) namespaces.set(name, lenient({}));
  return namespaces.get(name);
}
api.window = lenient(api.window);
api.workspace = lenient(api.workspace);
api.commands = lenient(api.commands);

module.exports = new Proxy(api, {
  get(target, name) {
    if (name in target || typeof name !== 'string') return target[name];
    if (/^[a-z]/.test(name)) return namespace(name);
    if (!placeholders.has(name)) {
      // Static members (enums such as CodeActionKind.Empty.append(...)) are inert chains.
      const cls = { [name]: class {} }[name];
      placeholders.set(name, new Proxy(cls, { get: (t, n) => (n in t ? t[n] : chain) }));
    }
    return placeholders.get(name);
  },
});

