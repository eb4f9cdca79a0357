pub const BUILTIN_TOOLS: [&str; 4] = ["close_ticket", "handover_ticket", "read_tickets", "manage_tickets"];
