import Domain
import EntitySource
import Foundation

// Writes the entity types made from DomainSchema to the file named (make generate).
let args = CommandLine.arguments
guard args.count == 2 else {
    FileHandle.standardError.write(Data("usage: entity-source OUTPUT.swift\n".utf8))
    exit(2)
}
do {
    try EntitySource.render(DomainSchema.entities).write(toFile: args[1], atomically: true, encoding: .utf8)
} catch {
    FileHandle.standardError.write(Data("entity-source: cannot write \(args[1]): \(error)\n".utf8))
    exit(1)
}
