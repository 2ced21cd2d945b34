// `todo`: a command line over TodoCore, to try it and to show it working from a shell.
//
//   todo --store PATH add TITLE          adds a task, prints its id
//   todo --store PATH done ID            marks it done
//   todo --store PATH tag ID NAME        tags it
//   todo --store PATH list [SEARCH]      prints "[x] title #tag  id" per task
//   todo --store PATH sync PEER [TOKEN]  syncs with a store path or an `evctl serve` URL
//   todo --store PATH watch [N]          prints the list every time it changes (N times, else forever)
import Foundation
import TodoCore

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("todo: \(message)\n".utf8))
    exit(1)
}

func show(_ tasks: [Todos.Task]) {
    var out = ""
    for t in tasks {
        out += "[\(t.done ? "x" : " ")] \(t.title.filter { !$0.isNewline })" + t.tags.map { " #\($0)" }.joined() + "  \(t.id.uuidString.lowercased())\n"
    }
    out += "--\n"
    FileHandle.standardOutput.write(Data(out.utf8))
}

var args = Array(CommandLine.arguments.dropFirst())
var path = ProcessInfo.processInfo.environment["TODO_STORE"] ?? "./todo.evstore"
if args.first == "--store", args.count >= 2 {
    path = args[1]
    args.removeFirst(2)
}
guard let command = args.first else { fail("usage: todo [--store PATH] add|done|tag|list|sync|watch …") }
let rest = Array(args.dropFirst())

do {
    let todos = try Todos(path: path, readOnly: command == "list" || command == "watch")
    func id(_ s: String?) -> UUID {
        guard let s, let u = UUID(uuidString: s) else { fail("\(s ?? "nothing") is not a task id") }
        return u
    }
    switch command {
    case "add":
        guard let title = rest.first else { fail("add needs a title") }
        print(try await todos.add(title).uuidString.lowercased())
    case "done":
        try await todos.complete(id(rest.first))
    case "tag":
        guard rest.count == 2 else { fail("tag needs a task id and a tag name") }
        try await todos.tag(id(rest[0]), rest[1])
    case "list":
        show(try todos.tasks(matching: rest.first))
    case "sync":
        guard let peer = rest.first else { fail("sync needs a peer (a store path or a URL)") }
        let (pulled, pushed) = try await todos.sync(with: peer, token: rest.count > 1 ? rest[1] : nil)
        print("pulled \(pulled), pushed \(pushed)")
    case "watch":
        var left = rest.first.flatMap { Int($0) } ?? Int.max
        for try await tasks in todos.watchTasks() {
            show(tasks)
            left -= 1
            if left <= 0 { break }
        }
    default:
        fail("unknown command \(command)")
    }
    try todos.close()
} catch {
    fail(String(describing: error))
}
